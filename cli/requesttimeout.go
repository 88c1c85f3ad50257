package cli

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"
)

// responseTimeout bounds how long a request waits for the API server to
// begin its answer (the response headers), unless --request-timeout is
// given. client-go sets none: against an API server that accepts a
// connection and never answers (a black hole: a dead node behind a load
// balancer, a half-open tunnel), a request would wait for ever, and a
// wait's --unreachable-timeout, whose round starts at the first failed
// request, would never start. A watch is not cut: only the wait for its
// headers is bounded, never the stream that follows.
var responseTimeout = 10 * time.Second

// errNoAnswer is the failure of a request that got no answer in time.
type errNoAnswer struct{ limit time.Duration }

func (e *errNoAnswer) Error() string {
	return fmt.Sprintf("the API server did not answer within %s", e.limit)
}

// boundResponses makes each request fail when the API server has not begun
// to answer it within limit.
func boundResponses(limit time.Duration) func(http.RoundTripper) http.RoundTripper {
	return func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			ctx, cancel := context.WithCancel(r.Context())
			timer := time.AfterFunc(limit, cancel)
			resp, err := rt.RoundTrip(r.WithContext(ctx))
			if !timer.Stop() && r.Context().Err() == nil {
				// The timer fired: this is no cancellation of the caller's,
				// but an API server that does not answer.
				cancel()
				if resp != nil {
					_ = resp.Body.Close()
				}
				return nil, &errNoAnswer{limit: limit}
			}
			if err != nil {
				cancel()
				return nil, err
			}
			resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
			return resp, nil
		})
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// cancelOnClose ends a request's context once its body is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}
