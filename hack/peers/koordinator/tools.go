//go:build tools

// Package peers pins the command hack/build-peers.sh builds, so `go mod tidy` keeps its
// dependencies.
package peers

import _ "github.com/koordinator-sh/koordinator/cmd/koord-scheduler"
