package dashboard

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation"
)

// The page is plain HTML, CSS and JavaScript, embedded: no build step, no
// network but this server.
//
//go:embed assets
var assets embed.FS

var page = template.Must(template.ParseFS(assets, "assets/index.html"))

// heartbeat keeps an idle live feed open through proxies and lets the
// server notice a closed page.
const heartbeat = 15 * time.Second

// maxBody bounds a request's body: a pause's message is at most 4096.
const maxBody = 16 << 10

func (s *server) handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(assets, "assets")
	mux.Handle("GET /assets/", http.StripPrefix("/assets/", http.FileServerFS(static)))
	mux.HandleFunc("GET /favicon.ico", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/svg+xml")
		http.ServeFileFS(w, r, assets, "assets/icon.svg")
	})
	mux.HandleFunc("GET /{$}", s.index)
	mux.HandleFunc("GET /projects/{project}", s.index)
	mux.HandleFunc("GET /projects/{project}/{$}", s.index)
	mux.HandleFunc("GET /projects/{project}/stages/{stage}", s.index)
	mux.HandleFunc("GET /api/live", s.live)
	mux.HandleFunc("GET /api/projects/{project}/stages/{stage}/events", s.events)
	mux.HandleFunc("POST /api/projects/{project}/pause", s.pause)
	mux.HandleFunc("POST /api/projects/{project}/resume", s.resume)
	s.guard.next = mux
	return s.guard
}

func (s *server) index(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := page.Execute(w, map[string]string{"Token": s.guard.token}); err != nil {
		s.log.Error(err, "Cannot render the dashboard's page")
	}
}

// live is the page's feed (Server-Sent Events): everything first, then what
// changed, as it changes.
func (s *server) live(w http.ResponseWriter, r *http.Request) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	var v view
	beat := time.NewTicker(heartbeat)
	defer beat.Stop()
	for {
		m, wake := s.hub.next(&v, time.Now())
		if m != nil {
			b, err := json.Marshal(m)
			if err != nil {
				s.log.Error(err, "Cannot encode the dashboard's state")
				return
			}
			if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
				return
			}
			flusher.Flush()
		}
		select {
		case <-r.Context().Done():
			return
		case <-wake:
		case <-beat.C:
			if _, err := fmt.Fprint(w, ": still here\n\n"); err != nil {
				return
			}
			flusher.Flush()
		}
	}
}

func (s *server) events(w http.ResponseWriter, r *http.Request) {
	project, stage := r.PathValue("project"), r.PathValue("stage")
	if why := badNames(project, stage); why != "" {
		reply(w, http.StatusBadRequest, map[string]string{"error": why})
		return
	}
	ev, err := s.o.Act.Events(r.Context(), project, stage)
	if err != nil {
		refuse(w, err)
		return
	}
	reply(w, http.StatusOK, map[string]any{"events": ev})
}

// actionRequest is the body of a pause or a resume.
type actionRequest struct {
	Stage   string `json:"stage"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

func (s *server) pause(w http.ResponseWriter, r *http.Request) {
	s.act(w, r, func(ctx context.Context, project string, a actionRequest) (string, error) {
		return s.o.Act.Pause(ctx, project, a.Stage, a.Reason, a.Message)
	})
}

func (s *server) resume(w http.ResponseWriter, r *http.Request) {
	s.act(w, r, func(ctx context.Context, project string, a actionRequest) (string, error) {
		return s.o.Act.Resume(ctx, project, a.Stage)
	})
}

func (s *server) act(w http.ResponseWriter, r *http.Request, do func(context.Context, string, actionRequest) (string, error)) {
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		http.Error(w, "refused: a JSON body is required", http.StatusUnsupportedMediaType)
		return
	}
	var a actionRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody)).Decode(&a); err != nil || a.Stage == "" {
		reply(w, http.StatusBadRequest, map[string]string{"error": "the request must be JSON naming a stage (\"*\" for the project)"})
		return
	}
	project := r.PathValue("project")
	stage := a.Stage
	if stage == "*" {
		stage = "all" // any valid name: the project-wide pause
	}
	if why := badNames(project, stage); why != "" {
		reply(w, http.StatusBadRequest, map[string]string{"error": why})
		return
	}
	said, err := do(r.Context(), project, a)
	s.askAccess() // a refusal may mean the rights changed
	if err != nil {
		refuse(w, err)
		return
	}
	reply(w, http.StatusOK, map[string]string{"message": said})
}

// badNames says why a project or Stage name is not a Kubernetes name (a
// namespace is a DNS label, a Stage a DNS subdomain), or "": nothing else
// reaches a request to the API server, a field selector included.
func badNames(project, stage string) string {
	if errs := validation.IsDNS1123Label(project); len(errs) > 0 {
		return fmt.Sprintf("%q is not a project's name: %s", project, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(stage); len(errs) > 0 {
		return fmt.Sprintf("%q is not a Stage's name: %s", stage, strings.Join(errs, "; "))
	}
	return ""
}

// refuse answers with the API server's own refusal, its message as given
// and its code, or with the CLI's error (bad input) as a 400.
func refuse(w http.ResponseWriter, err error) {
	code := http.StatusBadRequest
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		if c := int(status.Status().Code); c >= 400 {
			code = c
		}
		reply(w, code, map[string]string{"error": status.Status().Message, "reason": string(status.Status().Reason)})
		return
	}
	reply(w, code, map[string]string{"error": err.Error()})
}

func reply(w http.ResponseWriter, code int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(body)
}
