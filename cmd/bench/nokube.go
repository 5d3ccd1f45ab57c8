//go:build !kubernetes

package main

import (
	"context"
	"errors"
)

// measureKube, in a bench built without the build tag kubernetes, refuses:
// the kubernetes phases need client-go and a Tether with the provider.
func measureKube(context.Context, string, string, options, func(string, ...any)) ([]target, []string, *kubeRaw, error) {
	return nil, nil, nil, errors.New("the kubernetes phases need a bench built with -tags kubernetes (make bench builds it so); or pass -kubernetes=false")
}
