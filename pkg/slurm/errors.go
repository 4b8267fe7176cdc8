package slurm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"

	utilerrors "k8s.io/apimachinery/pkg/util/errors"
)

// Kind classifies a failed call, so callers act on what happened, never on message text.
type Kind int

const (
	// KindUnavailable: slurmrestd or slurmctld could not be reached or answered 5xx-busy.
	// Nothing may be concluded about the object: fail closed.
	KindUnavailable Kind = iota
	// KindNotFound: Slurm answered that the object does not exist.
	KindNotFound
	// KindRejected: Slurm understood the request and refused it (bad partition, ...).
	KindRejected
)

func (k Kind) String() string {
	switch k {
	case KindNotFound:
		return "not found"
	case KindRejected:
		return "rejected"
	}
	return "unavailable"
}

// Error is every error pkg/slurm returns for a failed call.
type Error struct {
	Kind Kind
	Op   string
	// Code is the HTTP status slurmrestd answered with, 0 when there was no answer.
	Code int
	// Messages are Slurm's own words (from the response's errors), if any.
	Messages []string
	Err      error
}

func (e *Error) Error() string {
	if len(e.Messages) > 0 {
		return fmt.Sprintf("slurm %s: %s", e.Op, strings.Join(e.Messages, "; "))
	}
	return fmt.Sprintf("slurm %s: %s: %v", e.Op, e.Kind, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// IsNotFound, IsUnavailable and IsRejected classify an error from this package.
func IsNotFound(err error) bool    { return kindOf(err) == KindNotFound }
func IsRejected(err error) bool    { return kindOf(err) == KindRejected }
func IsUnavailable(err error) bool { return err != nil && kindOf(err) == KindUnavailable }

func kindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return KindUnavailable
}

// statusByText maps the HTTP status texts slurm-client puts first in its errors back to
// their codes: slurm-client reports a non-200 answer as an aggregate whose first entry is
// http.StatusText(code), followed by the response's own error descriptions.
var statusByText = func() map[string]int {
	m := map[string]int{}
	for code := 100; code < 600; code++ {
		if t := http.StatusText(code); t != "" {
			m[t] = code
		}
	}
	return m
}()

// errInvalidNodeName is slurmctld's text for ESLURM_INVALID_NODE_NAME, which slurmrestd
// answers with 422 (not 404) when a request names a node it does not have.
const errInvalidNodeName = "Invalid node name specified"

// errNodeConfigUnavailable is slurmctld's text for ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE:
// no set of the nodes Slurm has now could ever run the job (more nodes than exist, say).
const errNodeConfigUnavailable = "Requested node configuration is not available"

// NeedsOtherNodes reports whether Slurm refused a job only because none of its current
// nodes could ever run it: the same job may be accepted once nodes join.
func NeedsOtherNodes(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Kind == KindRejected && slices.Contains(e.Messages, errNodeConfigUnavailable)
}

// classifyNode is classify for calls naming one node: Slurm's "no such node" is NotFound.
// Only here, because a submit naming an unknown node is a rejected job, not a missing one.
func classifyNode(op string, err error) error {
	err = classify(op, err)
	var e *Error
	if errors.As(err, &e) && e.Kind == KindRejected && slices.Contains(e.Messages, errInvalidNodeName) {
		e.Kind = KindNotFound
	}
	return err
}

// classify wraps an error from slurm-client into an *Error.
func classify(op string, err error) error {
	if err == nil {
		return nil
	}
	e := &Error{Op: op, Err: err, Kind: KindUnavailable}
	var urlErr *url.Error
	var netErr net.Error
	if errors.As(err, &urlErr) || errors.As(err, &netErr) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return e
	}
	parts := []error{err}
	var agg utilerrors.Aggregate
	if errors.As(err, &agg) {
		parts = agg.Errors()
	}
	code, ok := statusByText[parts[0].Error()]
	if ok {
		parts = parts[1:]
		e.Code = code
	}
	for _, p := range parts {
		if msg := strings.TrimSpace(p.Error()); msg != "" {
			e.Messages = append(e.Messages, msg)
		}
	}
	switch {
	case code == http.StatusNotFound:
		e.Kind = KindNotFound
	case !ok:
		// An answer we cannot read (decoding failure, empty response): assume nothing.
		e.Kind = KindUnavailable
	case code == http.StatusBadGateway || code == http.StatusServiceUnavailable ||
		code == http.StatusGatewayTimeout || code == http.StatusUnauthorized ||
		code == http.StatusForbidden || code == http.StatusTooManyRequests ||
		code == http.StatusNetworkAuthenticationRequired:
		// Auth failures are configuration trouble, not a verdict on the object.
		e.Kind = KindUnavailable
	case code == http.StatusInternalServerError && len(e.Messages) == 0:
		e.Kind = KindUnavailable
	default:
		e.Kind = KindRejected
	}
	return e
}
