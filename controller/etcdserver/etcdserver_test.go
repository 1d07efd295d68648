package etcdserver

import (
	"context"
	"io"
	"log/slog"
	"testing"
)

func TestStartRestart(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := Start(ctx, Config{Dir: dir}, log)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Client().Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = Start(ctx, Config{Dir: dir}, log)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	resp, err := s.Client().Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("after restart got %v, want k=v", resp.Kvs)
	}
}
