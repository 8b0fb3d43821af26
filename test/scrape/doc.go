// Package scrape holds TestExportedMetrics: it builds both controller binaries, runs them as
// processes against envtest with some work to do (an adapter loaded, reloaded and deleted on
// a fake engine, a model routed), scrapes their /metrics and compares the metric names with
// hack/promcheck/testdata/exported-metrics.txt. That file is what the PromQL checks of the
// alerts and the dashboard (hack/promcheck) compare against, so it cannot go stale: a metric
// added, renamed or removed in the code fails this test until the file is regenerated
// (make metrics-scrape, i.e. this test with -update).
package scrape
