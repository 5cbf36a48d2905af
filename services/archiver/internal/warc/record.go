// Package warc writes WARC/1.1 records (ISO 28500:2017), each compressed as its own gzip
// member, and the CDXJ index lines that locate them. It is written for Trawl rather than
// taken from a library: see services/archiver/README.md, "Archiving (archiver)".
package warc

import (
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base32"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"
)

// Record types and revisit profiles of WARC 1.1.
const (
	TypeWarcinfo = "warcinfo"
	TypeRequest  = "request"
	TypeResponse = "response"
	TypeRevisit  = "revisit"

	ProfileIdenticalPayload  = "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest"
	ProfileServerNotModified = "http://netpreserve.org/warc/1.1/revisit/server-not-modified"

	ContentTypeRequest  = "application/http;msgtype=request"
	ContentTypeResponse = "application/http;msgtype=response"
	ContentTypeFields   = "application/warc-fields"
)

// Field is one WARC header field; order is kept as written.
type Field struct{ Name, Value string }

// Record is one record before serialisation. Content-Length and WARC-Block-Digest are
// computed from Block; every other named field is written in Fields' order.
type Record struct {
	Fields []Field
	Block  [][]byte // the block, in parts (e.g. HTTP head and body) to avoid copying
}

// Digest is the WARC digest form of sha1(parts…): "sha1:" and the base32 of the hash.
func Digest(parts ...[]byte) string {
	h := sha1.New()
	for _, p := range parts {
		h.Write(p)
	}
	return "sha1:" + base32.StdEncoding.EncodeToString(h.Sum(nil))
}

// Date is the WARC-Date form of t: UTC, millisecond precision (WARC 1.1 §5.4 allows
// fractions of a second).
func Date(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

// Timestamp14 is the 14-digit form of t used by CDXJ and Wayback URLs.
func Timestamp14(t time.Time) string { return t.UTC().Format("20060102150405") }

// RecordID is a urn:uuid derived from key (a message id and a role), so that the records
// written for one message have the same ids however often it is written.
func RecordID(key string) string {
	sum := sha1.Sum([]byte("trawl-warc-record:" + key))
	u := sum[:16]
	u[6] = u[6]&0x0f | 0x50 // version 5 (name-based, SHA-1)
	u[8] = u[8]&0x3f | 0x80 // RFC 4122 variant
	return "<urn:uuid:" + uuidString(u) + ">"
}

// RandomID is a fresh urn:uuid (version 4).
func RandomID() string {
	var u [16]byte
	_, _ = rand.Read(u[:])
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return "<urn:uuid:" + uuidString(u[:]) + ">"
}

func uuidString(u []byte) string {
	h := hex.EncodeToString(u)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// Member serialises r as a gzip member: "WARC/1.1", the fields, WARC-Block-Digest,
// Content-Length, a blank line, the block and two CRLFs. Each record being its own member,
// a reader can start at any record's offset and a file cut inside one record is readable
// up to the record before it.
func Member(r *Record) ([]byte, error) {
	var size int
	for _, p := range r.Block {
		size += len(p)
	}
	var head bytes.Buffer
	head.WriteString("WARC/1.1\r\n")
	for _, f := range r.Fields {
		head.WriteString(f.Name + ": " + f.Value + "\r\n")
	}
	head.WriteString("WARC-Block-Digest: " + Digest(r.Block...) + "\r\n")
	head.WriteString("Content-Length: " + strconv.Itoa(size) + "\r\n\r\n")

	var out bytes.Buffer
	out.Grow(head.Len() + size/3 + 256)
	zw, err := gzip.NewWriterLevel(&out, gzip.DefaultCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(head.Bytes()); err != nil {
		return nil, fmt.Errorf("warc: compress record: %w", err)
	}
	for _, p := range r.Block {
		if _, err := zw.Write(p); err != nil {
			return nil, fmt.Errorf("warc: compress record: %w", err)
		}
	}
	if _, err := zw.Write([]byte("\r\n\r\n")); err != nil {
		return nil, fmt.Errorf("warc: compress record: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("warc: compress record: %w", err)
	}
	return out.Bytes(), nil
}
