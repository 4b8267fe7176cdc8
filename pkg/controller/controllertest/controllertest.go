// Package controllertest is what the reconciler tests of pkg/controller/* share: a fake API
// server with the recorder the reconciler's events go to (API), and for the controllers that
// read Slurm through the shared watcher, slurmtest.Fake with its watcher (Fixture).
package controllertest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/kubeslurm/kubeslurm/pkg/slurm"
	"github.com/kubeslurm/kubeslurm/pkg/slurm/slurmtest"
)

// API is a fake API server and the recorder a reconciler's events go to.
type API struct {
	Kube     client.Client
	Recorder *events.FakeRecorder
}

// NewAPI builds the API server from kube (its objects, scheme, status subresources).
func NewAPI(kube *fake.ClientBuilder) API {
	return API{Kube: kube.Build(), Recorder: events.NewFakeRecorder(100)}
}

// Events takes the events recorded since the last call, one a line.
func (a API) Events() string {
	var out []string
	for {
		select {
		case e := <-a.Recorder.Events:
			out = append(out, e)
		default:
			return strings.Join(out, "\n")
		}
	}
}

// Fixture is an API and Slurm read through one watcher, as the controller runs them. The
// watcher reads Slurm only on Poll.
type Fixture struct {
	API
	T       *testing.T
	Slurm   *slurmtest.Fake
	Watcher *slurm.Watcher
}

// New is a Fixture over the given fake Slurm and API server.
func New(t *testing.T, sl *slurmtest.Fake, kube *fake.ClientBuilder) *Fixture {
	return &Fixture{API: NewAPI(kube), T: t, Slurm: sl, Watcher: slurm.NewWatcher(sl, time.Hour, time.Hour)}
}

// Poll has the watcher read Slurm now.
func (f *Fixture) Poll() { require.NoError(f.T, f.Watcher.Poll(context.Background())) }
