// Package chart holds the tests of the Helm chart deploy/chart/loraplane: with its default
// values it renders exactly the objects of `kubectl kustomize deploy/default` (Helm's own
// labels aside), so the two ways to install can never drift apart; and a values file that
// sets everything (ci/full-values.yaml) renders what each value promises.
package chart
