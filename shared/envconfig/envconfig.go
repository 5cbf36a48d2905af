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
	if v, ok := r.get(name); ok {
		return v
	}
	return def
}

// Int returns the variable as an integer, or def.
func (r *Reader) Int(name string, def int) int {
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

// Float returns the variable as a number, or def.
func (r *Reader) Float(name string, def float64) float64 {
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
