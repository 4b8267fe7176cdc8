package slurm

import (
	"context"
	"crypto/rsa"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"time"

	slurmclient "github.com/SlinkyProject/slurm-client/pkg/client"
	"github.com/SlinkyProject/slurm-client/pkg/object"

	"github.com/kubeslurm/kubeslurm/pkg/slurmjob"
)

// Client is the set of Slurm calls kubeslurm makes. Every error it returns is an *Error.
type Client interface {
	// Submit submits a placeholder job and returns it as Slurm recorded it.
	Submit(ctx context.Context, spec slurmjob.JobSpec) (*Job, error)
	// Cancel cancels a job; cancelling a job that already ended is not an error.
	Cancel(ctx context.Context, id int32) error
	GetJob(ctx context.Context, id int32) (*Job, error)
	// ListJobs reads every job Slurm has, in full: at 10,000 queued jobs about 100 MB.
	// The watcher calls it at start and on its slow full resync only.
	ListJobs(ctx context.Context) ([]Job, error)
	// JobStates reads the state of exactly the jobs named (slurmrestd's jobs/state): a
	// few bytes a job. A job Slurm no longer has is absent from the answer.
	JobStates(ctx context.Context, ids []int32) (map[int32]JobStatus, error)
	ListNodes(ctx context.Context) ([]Node, error)
	// ListNodesSince reads the nodes only if Slurm changed any since lastUpdate (a
	// NodeListing's LastUpdate; 0 reads them all).
	ListNodesSince(ctx context.Context, lastUpdate int64) (*NodeListing, error)
	Ping(ctx context.Context) error
	// Nudge makes slurmctld run its scheduler now, by an update of a pending job that
	// changes nothing. Slurm does not schedule when an external job ends (no epilog
	// completes), so without it the nodes a placeholder freed wait for the periodic
	// scheduler or backfill pass (up to a minute).
	Nudge(ctx context.Context, pending *Job) error

	// GetNode reads one node from slurmctld now (not from the watcher's cache).
	GetNode(ctx context.Context, name string) (*Node, error)
	// DrainNode sets DRAIN on a node, with the reason (passed through SanitizeReason).
	DrainNode(ctx context.Context, name, reason string) error
	// UndrainNode clears DRAIN; a node that is also DOWN stays down.
	UndrainNode(ctx context.Context, name string) error
	// DeleteNode removes a dynamic node; slurmctld refuses a busy one. Deleting a node
	// that is already gone is not an error.
	DeleteNode(ctx context.Context, name string) error
	// SetNodeTopology sets a node's own topology ("<topology>:<block>"), which overrides
	// topology.yaml for that node, live (no reconfigure). The block must exist.
	SetNodeTopology(ctx context.Context, name, topology string) error
	// Reconfigure makes slurmctld (and every slurmd) re-read their configuration files,
	// topology.yaml among them (GET /reconfigure).
	Reconfigure(ctx context.Context) error
}

// Config says how to reach slurmrestd.
type Config struct {
	URL        string
	User       string
	JWTKeyFile string
	// RSAKey and RSAKeyID sign RS256 tokens instead (slurmctld knows the public key from its
	// JWKS file); JWTKeyFile is then not read.
	RSAKey   *rsa.PrivateKey
	RSAKeyID string
	// TokenLifetime of the minted JWTs (renewed at half-life).
	TokenLifetime time.Duration
	// Timeout of one request.
	Timeout time.Duration
	// ListTimeout bounds a listing of every job instead: at 10,000 queued jobs slurmctld
	// and slurmrestd take longer than Timeout to pack and encode its 100 MB.
	ListTimeout time.Duration
}

// DefaultListTimeout is Config.ListTimeout's default.
const DefaultListTimeout = 3 * time.Minute

// deadlineTransport bounds each request, answer included: a listing of every job by
// listTimeout, any other request by timeout.
type deadlineTransport struct {
	timeout, listTimeout time.Duration
	next                 http.RoundTripper
}

func (t *deadlineTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	d := t.timeout
	if req.Method == http.MethodGet && req.URL.Path == fullJobListPath {
		d = t.listTimeout
	}
	ctx, cancel := context.WithTimeout(req.Context(), d)
	resp, err := t.next.RoundTrip(req.WithContext(ctx))
	if err != nil {
		cancel()
		return nil, err
	}
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

// cancelOnClose ends a request's deadline once its answer has been read.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelOnClose) Close() error {
	defer b.cancel()
	return b.ReadCloser.Close()
}

// NewClient connects to slurmrestd with tokens minted from the JWT key.
func NewClient(cfg Config) (Client, error) {
	if cfg.URL == "" || cfg.User == "" || (cfg.JWTKeyFile == "" && cfg.RSAKey == nil) {
		return nil, fmt.Errorf("slurm client needs a slurmrestd URL, a user and a JWT key")
	}
	if cfg.TokenLifetime == 0 {
		cfg.TokenLifetime = time.Hour
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 15 * time.Second
	}
	if cfg.ListTimeout == 0 {
		cfg.ListTimeout = DefaultListTimeout
	}
	tokens := NewTokenSource(cfg.JWTKeyFile, cfg.User, cfg.TokenLifetime)
	tokens.RSAKey, tokens.KeyID = cfg.RSAKey, cfg.RSAKeyID
	first, err := tokens.Token()
	if err != nil {
		return nil, err
	}
	httpClient := &http.Client{Transport: &deadlineTransport{
		timeout: cfg.Timeout, listTimeout: max(cfg.Timeout, cfg.ListTimeout),
		next: &tokenTransport{source: tokens, next: http.DefaultTransport},
	}}
	// Informers are not used: the Watcher polls once for every consumer.
	c, err := slurmclient.NewClient(&slurmclient.Config{Server: cfg.URL, AuthToken: first, HTTPClient: httpClient})
	if err != nil {
		return nil, fmt.Errorf("creating slurm client: %w", err)
	}
	// slurm-client's object client has no state read and no update_time: those two reads
	// use its generated API client, on the same transport.
	raw, err := newRawClient(cfg.URL, httpClient)
	if err != nil {
		return nil, fmt.Errorf("creating slurm client: %w", err)
	}
	return instrument(&client{c: c, raw: raw}), nil
}

// Wrap adapts a slurm-client Client (the real one, or its fake in tests); every call is
// counted in pkg/metrics. Without slurmrestd's generated API client behind it, JobStates
// and ListNodesSince fall back to full listings.
func Wrap(c slurmclient.Client) Client { return instrument(&client{c: c}) }

type client struct {
	c   slurmclient.Client
	raw rawClient
}

func (c *client) Submit(ctx context.Context, spec slurmjob.JobSpec) (*Job, error) {
	out := &apiJob{}
	if err := c.c.Create(ctx, out, submitRequest(spec)); err != nil {
		return nil, classify("submit", err)
	}
	j := jobFromAPI(out)
	return &j, nil
}

func (c *client) Cancel(ctx context.Context, id int32) error {
	j := &apiJob{}
	j.JobId = &id
	err := classify("cancel job "+strconv.Itoa(int(id)), c.c.Delete(ctx, j))
	if IsNotFound(err) {
		return nil // already gone: the outcome the caller wanted
	}
	return err
}

func (c *client) Nudge(ctx context.Context, pending *Job) error {
	j := &apiJob{}
	j.JobId = &pending.ID
	return classify("nudge scheduler via job "+strconv.Itoa(int(pending.ID)), c.c.Update(ctx, j, nudgeRequest(pending)))
}

func (c *client) GetJob(ctx context.Context, id int32) (*Job, error) {
	out := &apiJob{}
	key := object.ObjectKey(strconv.Itoa(int(id)))
	if err := c.c.Get(ctx, key, out, &slurmclient.GetOptions{SkipCache: true}); err != nil {
		return nil, classify("get job "+string(key), err)
	}
	j := jobFromAPI(out)
	return &j, nil
}

func (c *client) ListJobs(ctx context.Context) ([]Job, error) {
	list := &apiJobList{}
	if err := c.c.List(ctx, list, &slurmclient.ListOptions{SkipCache: true}); err != nil {
		return nil, classify("list jobs", err)
	}
	out := make([]Job, len(list.Items))
	for i := range list.Items {
		out[i] = jobFromAPI(&list.Items[i])
	}
	return out, nil
}

func (c *client) JobStates(ctx context.Context, ids []int32) (map[int32]JobStatus, error) {
	out := make(map[int32]JobStatus, len(ids))
	if c.raw == nil {
		all, err := c.ListJobs(ctx)
		if err != nil {
			return nil, err
		}
		want := make(map[int32]bool, len(ids))
		for _, id := range ids {
			want[id] = true
		}
		for i := range all {
			if want[all[i].ID] {
				out[all[i].ID] = statusOf(&all[i])
			}
		}
		return out, nil
	}
	// A bounded query string per request, whatever the number of jobs.
	for chunk := range slices.Chunk(ids, jobStatesPerRequest) {
		if err := c.raw.jobStates(ctx, chunk, out); err != nil {
			return nil, classify("read job states", err)
		}
	}
	return out, nil
}

// jobStatesPerRequest bounds the job ids of one state read (about 8 bytes each in its URL).
const jobStatesPerRequest = 500

func (c *client) ListNodesSince(ctx context.Context, lastUpdate int64) (*NodeListing, error) {
	if c.raw == nil {
		nodes, err := c.ListNodes(ctx)
		if err != nil {
			return nil, err
		}
		return &NodeListing{Nodes: nodes}, nil
	}
	l, err := c.raw.nodesSince(ctx, lastUpdate)
	return l, classify("list nodes", err)
}

func (c *client) ListNodes(ctx context.Context) ([]Node, error) {
	list := &apiNodeList{}
	if err := c.c.List(ctx, list, &slurmclient.ListOptions{SkipCache: true}); err != nil {
		return nil, classify("list nodes", err)
	}
	return nodesFromAPI(list), nil
}

func (c *client) Ping(ctx context.Context) error {
	return classify("ping", c.c.List(ctx, &apiPingList{}, &slurmclient.ListOptions{SkipCache: true}))
}

func (c *client) GetNode(ctx context.Context, name string) (*Node, error) {
	out := &apiNode{}
	if err := c.c.Get(ctx, object.ObjectKey(name), out, &slurmclient.GetOptions{SkipCache: true}); err != nil {
		return nil, classifyNode("get node "+name, err)
	}
	n := nodeFromAPI(out)
	return &n, nil
}

func (c *client) DrainNode(ctx context.Context, name, reason string) error {
	return classifyNode("drain node "+name, c.c.Update(ctx, nodeKey(name), drainRequest(SanitizeReason(reason))))
}

func (c *client) UndrainNode(ctx context.Context, name string) error {
	return classifyNode("undrain node "+name, c.c.Update(ctx, nodeKey(name), undrainRequest()))
}

func (c *client) DeleteNode(ctx context.Context, name string) error {
	err := classifyNode("delete node "+name, c.c.Delete(ctx, nodeKey(name)))
	if IsNotFound(err) {
		return nil
	}
	return err
}

func (c *client) SetNodeTopology(ctx context.Context, name, topology string) error {
	return classifyNode("set topology of node "+name, c.c.Update(ctx, nodeKey(name), topologyRequest(topology)))
}

func (c *client) Reconfigure(ctx context.Context) error {
	return classify("reconfigure", c.c.Get(ctx, "", &apiReconfigure{}, &slurmclient.GetOptions{SkipCache: true}))
}
