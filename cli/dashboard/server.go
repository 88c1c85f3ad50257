package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"k8s.io/klog/v2"
)

// DefaultPort is the dashboard's port unless --port says otherwise.
const DefaultPort = 3100

// ServingPrefix begins the first line the CLI prints once the page serves,
// followed by its address and a space: scripts (the demo, the tests, the
// bench) read the address from it.
const ServingPrefix = "kargo-latch dashboard: "

// AddressIn is the page's address in the CLI's first line, or "".
func AddressIn(line string) string {
	rest, ok := strings.CutPrefix(line, ServingPrefix)
	if !ok {
		return ""
	}
	address, _, _ := strings.Cut(strings.TrimSpace(rest), " ")
	return address
}

// Options are what the CLI gives the page: its reading of the cluster and
// its actions, all with the user's own credentials.
type Options struct {
	// Address and Port to listen on; Address must be a loopback address.
	Address string
	Port    int
	// Watch starts reading what the page shows; it signals changed on every
	// change, and returns how to take a Snapshot.
	Watch func(ctx context.Context, changed chan<- struct{}) (func() Snapshot, error)
	// Act pauses and resumes, and says what the user may do.
	Act Actor
	// Ready, when set, is called with the page's URL once it serves.
	Ready func(url string)
}

// Actor is the CLI's pause and resume, and the API server's answer to
// "may I?".
type Actor interface {
	// Pause makes a StagePause for stage ("*": the project) and says what
	// it did.
	Pause(ctx context.Context, project, stage, reason, message string) (string, error)
	// Resume deletes the Stage's own pauses (stage "*": the project's) and
	// says what it did and what still holds.
	Resume(ctx context.Context, project, stage string) (string, error)
	// Access asks the API server what the user may do in project.
	Access(ctx context.Context, project string) (Access, error)
	// Events are the Stage's Events, newest first.
	Events(ctx context.Context, project, stage string) ([]Event, error)
}

// Event is one Kubernetes Event on a Stage.
type Event struct {
	Type    string    `json:"type"`
	Reason  string    `json:"reason"`
	Message string    `json:"message"`
	Count   int32     `json:"count"`
	Last    time.Time `json:"last"`
	Source  string    `json:"source,omitempty"`
}

// settle is how long the page waits after a change for the changes that
// come with it (a pause labels the Stage, writes its status and the
// Stage's record within milliseconds) before it sends them, in one message.
const settle = 50 * time.Millisecond

// accessRefresh is how often the rights are asked again: a RoleBinding
// given or taken shows within this long, or at once after any action.
const accessRefresh = 15 * time.Second

// Serve serves the page until ctx ends.
func Serve(ctx context.Context, o Options) error {
	ip := net.ParseIP(o.Address)
	if o.Address == "localhost" {
		ip = net.IPv4(127, 0, 0, 1)
	}
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("--address %q is not a loopback address: the dashboard acts with your credentials, so it serves only you, on 127.0.0.1 or ::1 (serving it to others is out of scope: see docs/dashboard.md)", o.Address)
	}
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: ip, Port: o.Port})
	if err != nil {
		return fmt.Errorf("listening on %s: %w", net.JoinHostPort(ip.String(), fmt.Sprint(o.Port)), err)
	}
	defer func() { _ = ln.Close() }()
	s, err := start(ctx, o, ln.Addr().(*net.TCPAddr))
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: s.handler(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		IdleTimeout: 2 * time.Minute,
		// The feeds end with ctx, so that a shutdown need not wait for them.
		BaseContext: func(net.Listener) context.Context { return ctx }}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	if o.Ready != nil {
		o.Ready(s.url)
	}
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// server is one dashboard process.
type server struct {
	o     Options
	hub   *hub
	guard *guard
	url   string
	// accessNow asks for the rights to be checked again at once.
	accessNow chan struct{}
	log       klog.Logger
}

func start(ctx context.Context, o Options, addr *net.TCPAddr) (*server, error) {
	hosts := allowedHosts(addr)
	host := hosts[len(hosts)-1] // localhost:PORT for a loopback bind
	s := &server{o: o, hub: newHub(), url: "http://" + host + "/", accessNow: make(chan struct{}, 1),
		log: klog.FromContext(ctx).WithName("dashboard")}
	s.guard = &guard{hosts: hosts, token: newToken()}
	changed := make(chan struct{}, 1)
	snapshot, err := o.Watch(ctx, changed)
	if err != nil {
		return nil, err
	}
	if err := s.hub.update(snapshot()); err != nil {
		return nil, err
	}
	s.askAccess() // asked at once, while the page already serves
	go s.follow(ctx, changed, snapshot)
	go s.refreshAccess(ctx)
	return s, nil
}

// follow takes a snapshot after every change, once the changes that come
// with it have settled.
func (s *server) follow(ctx context.Context, changed <-chan struct{}, snapshot func() Snapshot) {
	known := len(s.hub.projects())
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(settle):
		}
		if err := s.hub.update(snapshot()); err != nil {
			s.log.Error(err, "Cannot encode the dashboard's state")
		}
		if n := len(s.hub.projects()); n != known { // a new project: ask its rights now
			known = n
			s.askAccess()
		}
	}
}

func (s *server) askAccess() {
	select {
	case s.accessNow <- struct{}{}:
	default:
	}
}

func (s *server) refreshAccess(ctx context.Context) {
	t := time.NewTicker(accessRefresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.accessNow:
		}
		s.checkAccess(ctx)
	}
}

// checkAccess asks the rights in every project; a project whose question
// fails keeps its last answer.
func (s *server) checkAccess(ctx context.Context) {
	out := map[string]Access{}
	s.hub.mu.Lock()
	for k, v := range s.hub.access {
		out[k] = v
	}
	s.hub.mu.Unlock()
	for _, p := range s.hub.projects() {
		a, err := s.o.Act.Access(ctx, p)
		if err != nil {
			s.log.V(1).Info("Cannot ask the API server what the user may do", "project", p, "err", err)
			continue
		}
		out[p] = a
	}
	s.hub.setAccess(out)
}
