package localapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Backend does the work behind the API. Implementations must be safe for
// concurrent use.
type Backend interface {
	Create(ctx context.Context, r CreateRequest) (*CreateResponse, error)
	Delete(ctx context.Context, name string) error
	List() []Endpoint
	Status() Status
}

type connKey struct{}

// Serve listens on socket (replacing a stale socket file), accepts only
// root peers, and serves until ctx ends.
func Serve(ctx context.Context, socket string, b Backend, log *slog.Logger) error {
	if err := os.MkdirAll(filepath.Dir(socket), 0o755); err != nil {
		return fmt.Errorf("localapi: %w", err)
	}
	if err := os.Remove(socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("localapi: remove stale socket: %w", err)
	}
	old := unix.Umask(0o077)
	l, err := net.Listen("unix", socket)
	unix.Umask(old)
	if err != nil {
		return fmt.Errorf("localapi: listen %s: %w", socket, err)
	}
	if err := os.Chmod(socket, 0o600); err != nil {
		l.Close()
		return fmt.Errorf("localapi: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/endpoints", func(w http.ResponseWriter, r *http.Request) {
		var req CreateRequest
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			writeErr(w, &Error{Code: "invalid", Message: "request body: " + err.Error()})
			return
		}
		resp, err := b.Create(r.Context(), req)
		if err != nil {
			log.Warn("endpoint create failed", "endpoint", req.Name, "err", err)
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusCreated, resp)
	})
	mux.HandleFunc("DELETE /v1/endpoints/{name}", func(w http.ResponseWriter, r *http.Request) {
		if err := b.Delete(r.Context(), r.PathValue("name")); err != nil {
			writeErr(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /v1/endpoints", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, b.List())
	})
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, b.Status())
	})
	root := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, ok := r.Context().Value(connKey{}).(*net.UnixConn); ok {
			if uid, err := peerUID(c); err != nil || uid != 0 {
				writeErr(w, &Error{Code: "forbidden", Message: "only root may use the skiff-agent socket"})
				return
			}
		}
		mux.ServeHTTP(w, r)
	})
	srv := &http.Server{Handler: root, ReadHeaderTimeout: 5 * time.Second,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context { return context.WithValue(ctx, connKey{}, c) }}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	log.Info("local API listening", "socket", socket)
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("localapi: %w", err)
	}
	return nil
}

func peerUID(c *net.UnixConn) (uint32, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) { cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return 0, err
	}
	if serr != nil {
		return 0, serr
	}
	return cred.Uid, nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, err error) {
	var e *Error
	if !errors.As(err, &e) {
		e = &Error{Code: "failed", Message: err.Error()}
	}
	code := map[string]int{"invalid": 400, "forbidden": 403, "not-found": 404, "exists": 409, "exhausted": 507, "unavailable": 503}[e.Code]
	if code == 0 {
		code = 500
	}
	if strings.TrimSpace(e.Message) == "" {
		e.Message = "failed"
	}
	writeJSON(w, code, e)
}
