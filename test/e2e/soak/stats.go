package main

import (
	"math"
	"slices"
	"time"
)

// summary is p50/p99/max of durations, in seconds.
type summary struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50Seconds"`
	P99 float64 `json:"p99Seconds"`
	Max float64 `json:"maxSeconds"`
}

// summarize returns the nearest-rank percentiles of ds.
func summarize(ds []time.Duration) summary {
	if len(ds) == 0 {
		return summary{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := func(p float64) time.Duration {
		i := int(math.Ceil(p*float64(len(s)))) - 1
		return s[max(0, min(i, len(s)-1))]
	}
	return summary{N: len(s), P50: rank(0.50).Seconds(), P99: rank(0.99).Seconds(), Max: s[len(s)-1].Seconds()}
}

// sample is one reading of a process: seconds since the run started and a value.
type sample struct {
	T, V float64
}

// slope fits v = a + b·t by least squares and returns b, per second. Fewer than two distinct
// times give 0.
func slope(samples []sample) float64 {
	n := float64(len(samples))
	if n < 2 {
		return 0
	}
	var st, sv float64
	for _, s := range samples {
		st += s.T
		sv += s.V
	}
	mt, mv := st/n, sv/n
	var num, den float64
	for _, s := range samples {
		num += (s.T - mt) * (s.V - mv)
		den += (s.T - mt) * (s.T - mt)
	}
	if den == 0 {
		return 0
	}
	return num / den
}

func mean(samples []sample) float64 {
	if len(samples) == 0 {
		return 0
	}
	var s float64
	for _, x := range samples {
		s += x.V
	}
	return s / float64(len(samples))
}
