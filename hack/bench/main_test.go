package main

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestParsePoints(t *testing.T) {
	got, err := parsePoints(options{points: "500:0:50:10:100, 0:0:500:50:0:1:16"})
	if err != nil {
		t.Fatal(err)
	}
	want := []Point{{S: 500, A: 50, P: 10, M: 100}, {A: 500, P: 50, R: 1, C: 16}}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("parsePoints = %+v, want %+v", got, want)
	}
	if l := got[0].loads(); l != 500 {
		t.Errorf("loads of 50 adapters on all 10 pods = %d, want 500", l)
	}
	if l := got[1].loads(); l != 500 {
		t.Errorf("loads of 500 single-replica adapters = %d, want 500", l)
	}
	if s := got[1].String(); s != "S=0 U=0 A×P=500×50 M=0 R=1 C=16" {
		t.Errorf("String = %q", s)
	}
	if ps, err := parsePoints(options{size: "capacity"}); err != nil || len(ps) != 2 || ps[0] != want[1] || ps[1].loads() != 4000 || ps[1].C*ps[1].P < ps[1].loads() {
		t.Errorf("preset capacity = %+v, %v; want %+v and a point of 4000 loads that fit", ps, err, want[1:])
	}
	for _, bad := range []string{"1:2:3:4", "1:2:3:4:5:6", "1:2:3:4:5:6:-1", "2000:0:200:20:0"} {
		if _, err := parsePoints(options{points: bad}); err == nil || !strings.Contains(err.Error(), "point") {
			t.Errorf("parsePoints(%q) = %v, want an error naming the point", bad, err)
		}
	}
}

func TestSampleLoads(t *testing.T) {
	var n atomic.Int64
	start := time.Now()
	done := make(chan *loadTimeline, 1)
	go func() { done <- sampleLoads(context.Background(), start, 10, func() int { return int(n.Load()) }) }()
	time.Sleep(50 * time.Millisecond)
	n.Store(5)
	time.Sleep(50 * time.Millisecond)
	n.Store(10)
	tl := <-done
	if tl.First < 0 || tl.First != tl.Half || tl.All < tl.Half {
		t.Errorf("timeline %+v: want first = half (5 of 10 came at once) <= all", tl)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if tl := sampleLoads(ctx, start, 10, func() int { return 0 }); tl.First != -1 || tl.Half != -1 || tl.All != -1 {
		t.Errorf("no loads: timeline %+v, want -1 for each", tl)
	}
}
