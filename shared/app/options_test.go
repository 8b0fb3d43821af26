package app

import (
	"flag"
	"strings"
	"testing"
	"time"
)

func TestOptionsFlagsAndValidation(t *testing.T) {
	tests := map[string]struct {
		args    []string
		wantErr []string
	}{
		"defaults are valid": {},
		"everything set": {args: []string{"--metrics-bind-address=127.0.0.1:9090", "--leader-elect", "--watch-namespace=a, b",
			"--cache-sync-timeout=30s", "--metrics-secure", "-v=4"}},
		"metrics disabled":    {args: []string{"--metrics-bind-address=0"}},
		"bad bind address":    {args: []string{"--metrics-bind-address=8080"}, wantErr: []string{`--metrics-bind-address "8080"`}},
		"bad port":            {args: []string{"--health-probe-bind-address=:99999"}, wantErr: []string{`invalid port "99999"`}},
		"probes disabled":     {args: []string{"--health-probe-bind-address=0"}, wantErr: []string{"must not be disabled"}},
		"zero sync timeout":   {args: []string{"--cache-sync-timeout=0s"}, wantErr: []string{"--cache-sync-timeout must be positive"}},
		"zero start timeout":  {args: []string{"--controller-start-timeout=0s"}, wantErr: []string{"--controller-start-timeout must be positive"}},
		"bad lease timings":   {args: []string{"--leader-elect", "--leader-elect-renew-deadline=20s"}, wantErr: []string{"lease duration (15s) > renew deadline (20s)"}},
		"bad election id":     {args: []string{"--leader-elect", "--leader-election-id=Not_Valid"}, wantErr: []string{`--leader-election-id "Not_Valid"`}},
		"bad namespace":       {args: []string{"--watch-namespace=ok,Bad_NS"}, wantErr: []string{`--watch-namespace "Bad_NS"`}},
		"no AIBrix check":     {args: []string{"--aibrix-controller-leases="}},
		"other AIBrix leases": {args: []string{"--aibrix-controller-leases=aibrix/cm, aibrix/lora"}},
		"bad AIBrix lease":    {args: []string{"--aibrix-controller-leases=aibrix/cm,aibrix-controller-manager"}, wantErr: []string{`--aibrix-controller-leases: "aibrix-controller-manager" is not namespace/name`}},
		"several errors":      {args: []string{"--cache-sync-timeout=-1s", "--kube-api-qps=0"}, wantErr: []string{"--cache-sync-timeout", "--kube-api-qps"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			o := NewOptions("test-controller")
			fs := flag.NewFlagSet(name, flag.ContinueOnError)
			o.AddFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatalf("parse: %v", err)
			}
			err := o.Validate()
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("want errors %q, got none", tc.wantErr)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestOptionsParsing(t *testing.T) {
	o := NewOptions("x")
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse([]string{"--watch-namespace= a,,b ", "--cache-sync-timeout=45s", "--controller-start-timeout=5m"}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(o.WatchNamespaces, "|"); got != "a|b" {
		t.Errorf("namespaces = %q, want a|b", got)
	}
	if o.CacheSyncTimeout != 45*time.Second || o.ControllerStartTimeout != 5*time.Minute || o.LeaderElectionID != "x.loraplane.io" {
		t.Errorf("unexpected options: %+v", o)
	}
}
