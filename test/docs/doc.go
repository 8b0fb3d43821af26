// Package docs holds tests that keep the documentation in step with what the repository
// generates and ships (docs/security.md against the generated RBAC roles).
package docs
