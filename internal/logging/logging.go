// Package logging builds the *slog.Logger of Skiff's commands from the
// --log-level flag.
package logging

import (
	"fmt"
	"io"
	"log/slog"
)

// New returns a text logger writing to w at level ("debug", "info", "warn"
// or "error").
func New(w io.Writer, level string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: lvl})), nil
}
