//go:build tools

// Package trainingoperator is a wrapper module that pins the Kubeflow Training Operator
// release the optional PyTorchJob test builds (tests/cluster/test_pytorchjob_operator.py).
// It is never part of the product or of CI.
package trainingoperator

import _ "github.com/kubeflow/training-operator/cmd/training-operator.v1"
