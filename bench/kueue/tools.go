//go:build tools

// Package kueue is a wrapper module that pins the Kueue release the side-by-side
// benchmark builds (bench/kueue_side_by_side.py). It is never part of the product or CI.
package kueue

import _ "sigs.k8s.io/kueue/cmd/kueue"
