// Package envconfig reads configuration from TRAWL_* environment variables. A Reader
// collects every bad value instead of stopping at the first, so one start-up error lists
// all of them.
package envconfig

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Prefix is put before every variable name.
const Prefix = "TRAWL_"

// Reader reads typed values with defaults. The zero value reads the process environment.
type Reader struct {
	// Lookup replaces os.LookupEnv (tests).
	Lookup func(string) (string, bool)
	errs   []error
	read   []Setting
}

// Setting is one variable a Reader was asked for: its full name, the kind of value and the
// default the code gave, formatted as the kind is written (a duration as Go prints it, a
// size in bytes, a list comma-separated).
type Setting struct {
	Name    string // TRAWL_…
	Kind    Kind
	Default string
	// IfSet: the program reads the variable only when it is set and has no default of its
	// own (IntIfSet): a tool that must not guess a service's value.
	IfSet bool
}

// Kind is how a setting's value is read.
type Kind string

// The kinds of Reader's methods.
const (
	KindString   Kind = "string"
	KindInt      Kind = "int"
	KindFloat    Kind = "float"
	KindBool     Kind = "bool"
	KindDuration Kind = "duration"
	KindBytes    Kind = "bytes"
	KindList     Kind = "list"
)

// Read is every setting asked for so far, in order, each once: what a program reads, for
// the test that holds the README's tables, .env and compose.yaml to the code
// (shared/envconfig/envdoc).
func (r *Reader) Read() []Setting { return r.read }

func (r *Reader) note(name string, k Kind, def string) *Setting {
	full := Prefix + name
	for i := range r.read {
		if r.read[i].Name == full {
			return &r.read[i]
		}
	}
	r.read = append(r.read, Setting{Name: full, Kind: k, Default: def})
	return &r.read[len(r.read)-1]
}

// Overlay returns a Reader of env first and then the process environment: how a program
// that starts services with extra variables (devstack's stack, trawl-dev) reads a setting
// as those services will.
func Overlay(env map[string]string) *Reader {
	return &Reader{Lookup: func(k string) (string, bool) {
		if v, ok := env[k]; ok {
			return v, ok
		}
		return os.LookupEnv(k)
	}}
}

// FromMap returns a Reader over a fixed set of variables (tests).
func FromMap(m map[string]string) *Reader {
	return &Reader{Lookup: func(k string) (string, bool) { v, ok := m[k]; return v, ok }}
}

func (r *Reader) get(name string) (string, bool) {
	lookup := r.Lookup
	if lookup == nil {
		lookup = os.LookupEnv
	}
	v, ok := lookup(Prefix + name)
	v = strings.TrimSpace(v)
	return v, ok && v != ""
}

func (r *Reader) fail(name, v, want string, err error) {
	r.errs = append(r.errs, fmt.Errorf("%s%s=%q: want %s: %w", Prefix, name, v, want, err))
}

// String returns the variable or def.
func (r *Reader) String(name, def string) string {
	r.note(name, KindString, def)
	if v, ok := r.get(name); ok {
		return v
	}
	return def
}

// Int returns the variable as an integer, or def.
func (r *Reader) Int(name string, def int) int {
	r.note(name, KindInt, strconv.Itoa(def))
	v, ok := r.get(name)
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		r.fail(name, v, "an integer", err)
		return def
	}
	return n
}

// IntIfSet returns the variable as an integer and true, or 0 and false when it is unset:
// for a program that reads a service's setting and must not guess its default.
func (r *Reader) IntIfSet(name string) (int, bool) {
	r.note(name, KindInt, "").IfSet = true
	if _, ok := r.get(name); !ok {
		return 0, false
	}
	return r.Int(name, 0), true
}

// Float returns the variable as a number, or def.
func (r *Reader) Float(name string, def float64) float64 {
	r.note(name, KindFloat, strconv.FormatFloat(def, 'g', -1, 64))
	v, ok := r.get(name)
	if !ok {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		r.fail(name, v, "a number", err)
		return def
	}
	return f
}

// Bool returns the variable as a boolean (1/0, true/false, yes/no), or def.
func (r *Reader) Bool(name string, def bool) bool {
	r.note(name, KindBool, strconv.FormatBool(def))
	v, ok := r.get(name)
	if !ok {
		return def
	}
	switch strings.ToLower(v) {
	case "1", "true", "yes", "on":
		return true
	case "0", "false", "no", "off":
		return false
	}
	r.fail(name, v, "true or false", errors.New("not a boolean"))
	return def
}

// Duration returns the variable as a Go duration ("1.5s", "250ms"), or def. A bare number
// is read as seconds, which is how robots.txt and most operators think of delays.
func (r *Reader) Duration(name string, def time.Duration) time.Duration {
	r.note(name, KindDuration, def.String())
	v, ok := r.get(name)
	if !ok {
		return def
	}
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		return time.Duration(f * float64(time.Second))
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		r.fail(name, v, "a duration like 1s or 250ms", err)
		return def
	}
	return d
}

// Bytes returns a size: a plain number of bytes or one with a KiB/MiB/GiB (or KB/MB/GB,
// read as powers of 1024 too) suffix.
func (r *Reader) Bytes(name string, def int64) int64 {
	r.note(name, KindBytes, strconv.FormatInt(def, 10))
	v, ok := r.get(name)
	if !ok {
		return def
	}
	n, err := ParseBytes(v)
	if err != nil {
		r.fail(name, v, "a size like 1048576 or 1MiB", err)
		return def
	}
	return n
}

// List returns the variable split on commas and white space, or def.
func (r *Reader) List(name string, def []string) []string {
	r.note(name, KindList, strings.Join(def, ","))
	v, ok := r.get(name)
	if !ok {
		return def
	}
	return SplitList(v)
}

// Err returns every error met so far, joined, or nil.
func (r *Reader) Err() error { return errors.Join(r.errs...) }

// SplitList splits on commas and white space, dropping empty items.
func SplitList(s string) []string {
	return strings.FieldsFunc(s, func(c rune) bool { return c == ',' || c == ' ' || c == '\n' || c == '\t' || c == '\r' })
}

// ParseBytes parses sizes such as "512", "500KiB", "8MiB", "1GB".
func ParseBytes(s string) (int64, error) {
	s = strings.TrimSpace(s)
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1 << 10}, {"MB", 1 << 20}, {"GB", 1 << 30}, {"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"B", 1}}
	mult := int64(1)
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 {
		return 0, fmt.Errorf("bad size %q", s)
	}
	return int64(f * float64(mult)), nil
}

// Valid passes a configuration just loaded through its Validate, so that one error
// reports the values that could not be read (Load) or are out of range (Validate): a
// service's main reads `cfg, err := envconfig.Valid(config.Load(&envconfig.Reader{}))`.
func Valid[C interface{ Validate() error }](cfg C, err error) (C, error) {
	if err == nil {
		err = cfg.Validate()
	}
	return cfg, err
}
