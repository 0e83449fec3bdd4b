//go:build tools

// Package peers pins the commands hack/build-peers.sh builds, so `go mod tidy` keeps
// their dependencies.
package peers

import (
	_ "sigs.k8s.io/scheduler-plugins/cmd/controller"
	_ "sigs.k8s.io/scheduler-plugins/cmd/scheduler"
)
