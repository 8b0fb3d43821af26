package main

import (
	"reflect"
	"testing"
)

func TestParse(t *testing.T) {
	help := "Usage of x:\n" +
		"  -cache-sync-timeout duration\n    \tHow long each cache may take. (default 2m0s)\n" +
		"  -leader-elect\n    \tElect a leader.\n" +
		"  -paths value\n    \tFirst line\n    \tsecond line (default \"/a,/b\")\n" +
		"  -v value\n    \tnumber for the log level verbosity\n"
	want := []Flag{
		{Name: "cache-sync-timeout", Type: "duration", Default: "2m0s", Usage: "How long each cache may take."},
		{Name: "leader-elect", Type: "bool", Usage: "Elect a leader."},
		{Name: "paths", Type: "value", Default: `"/a,/b"`, Usage: "First line second line"},
		{Name: "v", Type: "value", Usage: "number for the log level verbosity"},
	}
	if got := Parse(help); !reflect.DeepEqual(got, want) {
		t.Errorf("Parse:\n got %+v\nwant %+v", got, want)
	}
}
