package store

import (
	"errors"
	"fmt"

	"github.com/skiff-sdn/skiff/controller/ipam"
)

// Kind classifies a store error; the API maps it to a gRPC code.
type Kind int

// Error kinds.
const (
	Invalid Kind = iota + 1
	NotFound
	AlreadyExists
	FailedPrecondition
	Exhausted
)

// Error is a store error. Field, when set, names the object field at fault.
type Error struct {
	Kind   Kind
	Field  string
	Reason string
}

func (e *Error) Error() string {
	if e.Field == "" {
		return e.Reason
	}
	return e.Field + ": " + e.Reason
}

// Is matches errors of the same kind, so that errors.Is(err,
// &Error{Kind: NotFound}) works.
func (e *Error) Is(target error) bool {
	var t *Error
	return errors.As(target, &t) && t.Kind == e.Kind && t.Field == "" && t.Reason == ""
}

// Sentinels for errors.Is.
var (
	ErrInvalid            = &Error{Kind: Invalid}
	ErrNotFound           = &Error{Kind: NotFound}
	ErrAlreadyExists      = &Error{Kind: AlreadyExists}
	ErrFailedPrecondition = &Error{Kind: FailedPrecondition}
	ErrExhausted          = &Error{Kind: Exhausted}
)

func invalid(field, format string, args ...any) error {
	return &Error{Kind: Invalid, Field: field, Reason: fmt.Sprintf(format, args...)}
}

func errorf(kind Kind, field, format string, args ...any) error {
	return &Error{Kind: kind, Field: field, Reason: fmt.Sprintf(format, args...)}
}

// fromField converts an ipam field error, prefixing the field path.
func fromField(prefix string, err error) error {
	var fe *ipam.FieldError
	if errors.As(err, &fe) {
		f := fe.Field
		if prefix != "" {
			f = prefix + "." + f
		}
		return &Error{Kind: Invalid, Field: f, Reason: fe.Reason}
	}
	return err
}
