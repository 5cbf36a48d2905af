// Package errclass sorts the errors of NATS JetStream and Redis into temporary (the same
// operation may succeed if tried again: a server restarting, a full stream draining, a
// failover) and permanent (it never will: a message over a size limit, a wrong expected
// sequence, a key of the wrong type, a refused credential). Every retry loop asks it
// before trying again, so that no error is retried for ever: a permanent one ends the
// operation (and, for a page, its URL) at once with its reason, and a temporary one is
// retried only within the caller's own bound (a lease deadline, a delivery count).
//
// The table is tested against the answers of a real nats-server and redis-server
// (shared/itest/errclass_test.go); the JetStream codes are nats-server's errors.json.
package errclass

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
)

// Class says whether an operation that failed may succeed when tried again.
type Class uint8

const (
	// Temporary: trying again may succeed; the caller bounds how long it tries.
	Temporary Class = iota
	// Permanent: trying again cannot succeed; the operation ends with its reason.
	Permanent
)

func (c Class) String() string {
	if c == Permanent {
		return "permanent"
	}
	return "temporary"
}

// Verdict is an error's class and a short reason, fit for a metric label (a bounded set:
// the names below).
type Verdict struct {
	Class  Class
	Reason string
}

// Reasons. Each names one row of the table.
const (
	ReasonHeaderTooLarge   = "header-too-large"  // JetStream 10097
	ReasonMessageTooLarge  = "message-too-large" // JetStream 10054
	ReasonMaxPayload       = "max-payload"       // the client refused: over the server's max_payload
	ReasonWrongSequence    = "wrong-sequence"    // JetStream 10071 (and the other expected-* checks)
	ReasonBadRequest       = "bad-request"       // any other JetStream 400
	ReasonStreamFull       = "stream-full"       // JetStream 10077 (a DiscardNew limit), 10047, 10028, 10023
	ReasonStreamNotFound   = "stream-not-found"  // JetStream 10059: until a service declares it again
	ReasonUnavailable      = "unavailable"       // JetStream 503s: no leader, not enabled yet
	ReasonNoResponders     = "no-responders"     // no stream (leader) answered
	ReasonTimeout          = "timeout"           // no answer in time
	ReasonConnection       = "connection"        // the connection is down, closing or reconnecting
	ReasonPermission       = "permission"        // NATS permissions, Redis NOPERM/auth
	ReasonBadSubject       = "bad-subject"       // an invalid subject or message
	ReasonRedisBusy        = "redis-busy"        // LOADING, BUSY, TRYAGAIN, max clients
	ReasonRedisOOM         = "redis-oom"         // OOM under maxmemory noeviction
	ReasonRedisReadOnly    = "redis-readonly"    // READONLY: a replica after failover
	ReasonRedisCluster     = "redis-cluster"     // CLUSTERDOWN, MASTERDOWN, NOREPLICAS, MOVED, ASK
	ReasonRedisNoScript    = "redis-noscript"    // NOSCRIPT: the script cache was flushed
	ReasonRedisWrongType   = "redis-wrongtype"   // WRONGTYPE
	ReasonRedisCommand     = "redis-command"     // ERR: a wrong command, argument or script error
	ReasonCanceled         = "canceled"          // the caller's context ended
	ReasonUnknownTemporary = "unknown"           // not in the table: retried within the caller's bound
)

// Of classifies err (nil: a Temporary verdict with no reason; callers test err first).
func Of(err error) Verdict {
	if err == nil {
		return Verdict{}
	}
	if v, ok := jetStream(err); ok {
		return v
	}
	if v, ok := natsClient(err); ok {
		return v
	}
	if v, ok := redisServer(err); ok {
		return v
	}
	switch {
	case errors.Is(err, context.Canceled):
		return Verdict{Temporary, ReasonCanceled}
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, syscall.ETIMEDOUT):
		return Verdict{Temporary, ReasonTimeout}
	case errors.Is(err, redis.ErrClosed), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, net.ErrClosed):
		return Verdict{Temporary, ReasonConnection}
	}
	var ne net.Error
	if errors.As(err, &ne) {
		if ne.Timeout() {
			return Verdict{Temporary, ReasonTimeout}
		}
		return Verdict{Temporary, ReasonConnection}
	}
	var oe *net.OpError
	if errors.As(err, &oe) {
		return Verdict{Temporary, ReasonConnection}
	}
	return Verdict{Temporary, ReasonUnknownTemporary}
}

// IsPermanent reports whether err can never be cured by trying again.
func IsPermanent(err error) bool { return err != nil && Of(err).Class == Permanent }

// JetStream error codes (nats-server's server/errors.json).
const (
	codeClusterNotAvail   = 10008
	codeInsufficientRes   = 10023
	codeMemoryExceeded    = 10028
	codeStorageExceeded   = 10047
	codeMessageTooLarge   = 10054
	codeStreamNotFound    = 10059
	codeWrongLastSequence = 10071
	codeStoreFailed       = 10077
	codeHeaderTooLarge    = 10097
)

func jetStream(err error) (Verdict, bool) {
	var ae *jetstream.APIError
	if !errors.As(err, &ae) {
		var je jetstream.JetStreamError
		if !errors.As(err, &je) || je.APIError() == nil {
			return Verdict{}, false
		}
		ae = je.APIError()
	}
	switch ae.ErrorCode {
	case codeHeaderTooLarge:
		return Verdict{Permanent, ReasonHeaderTooLarge}, true
	case codeMessageTooLarge:
		return Verdict{Permanent, ReasonMessageTooLarge}, true
	case codeWrongLastSequence:
		return Verdict{Permanent, ReasonWrongSequence}, true
	case codeStoreFailed, codeStorageExceeded, codeMemoryExceeded, codeInsufficientRes:
		// A stream at a DiscardNew limit (maximum messages, bytes, messages per subject)
		// refuses until its consumers take messages away.
		return Verdict{Temporary, ReasonStreamFull}, true
	case codeStreamNotFound:
		// Every service declares its streams on start: one deleted by hand comes back.
		return Verdict{Temporary, ReasonStreamNotFound}, true
	case codeClusterNotAvail:
		return Verdict{Temporary, ReasonUnavailable}, true
	}
	switch {
	case ae.Code == 400:
		// The request itself is wrong (the expected-* checks among them): sent again it
		// is still wrong.
		if strings.Contains(ae.Description, "wrong last") || strings.Contains(ae.Description, "expected") {
			return Verdict{Permanent, ReasonWrongSequence}, true
		}
		return Verdict{Permanent, ReasonBadRequest}, true
	case ae.Code == 0 && ae.ErrorCode == 0:
		// A client-side JetStream error without an API answer (no response, timeout).
		return Verdict{}, false
	}
	return Verdict{Temporary, ReasonUnavailable}, true
}

func natsClient(err error) (Verdict, bool) {
	switch {
	case errors.Is(err, nats.ErrMaxPayload):
		return Verdict{Permanent, ReasonMaxPayload}, true
	case errors.Is(err, nats.ErrBadSubject), errors.Is(err, nats.ErrInvalidMsg), errors.Is(err, nats.ErrBadHeaderMsg):
		return Verdict{Permanent, ReasonBadSubject}, true
	case errors.Is(err, nats.ErrPermissionViolation), errors.Is(err, nats.ErrAuthorization):
		return Verdict{Permanent, ReasonPermission}, true
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrNoStreamResponse):
		return Verdict{Temporary, ReasonNoResponders}, true
	case errors.Is(err, nats.ErrTimeout), errors.Is(err, jetstream.ErrAsyncPublishTimeout):
		return Verdict{Temporary, ReasonTimeout}, true
	case errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrConnectionDraining),
		errors.Is(err, nats.ErrConnectionReconnecting), errors.Is(err, nats.ErrReconnectBufExceeded),
		errors.Is(err, nats.ErrNoServers), errors.Is(err, nats.ErrDisconnected),
		errors.Is(err, jetstream.ErrJetStreamPublisherClosed), errors.Is(err, jetstream.ErrTooManyStalledMsgs):
		return Verdict{Temporary, ReasonConnection}, true
	}
	return Verdict{}, false
}

// redisServer classifies an error reply by its first word, as Redis defines them.
func redisServer(err error) (Verdict, bool) {
	var re redis.Error
	if !errors.As(err, &re) || errors.Is(err, redis.Nil) {
		return Verdict{}, false
	}
	msg := re.Error()
	word, _, _ := strings.Cut(msg, " ")
	switch word {
	case "NOSCRIPT":
		return Verdict{Temporary, ReasonRedisNoScript}, true
	case "OOM":
		// Under noeviction memory comes back as keys expire or the crawl frees queues.
		return Verdict{Temporary, ReasonRedisOOM}, true
	case "READONLY":
		return Verdict{Temporary, ReasonRedisReadOnly}, true
	case "LOADING", "BUSY", "TRYAGAIN":
		return Verdict{Temporary, ReasonRedisBusy}, true
	case "CLUSTERDOWN", "MASTERDOWN", "NOREPLICAS", "MOVED", "ASK":
		return Verdict{Temporary, ReasonRedisCluster}, true
	case "WRONGTYPE":
		return Verdict{Permanent, ReasonRedisWrongType}, true
	case "NOPERM", "NOAUTH", "WRONGPASS":
		return Verdict{Permanent, ReasonPermission}, true
	case "CROSSSLOT", "EXECABORT":
		// A command's keys in several cluster slots, or a transaction discarded for an
		// earlier error: the same command fails again.
		return Verdict{Permanent, ReasonRedisCommand}, true
	case "ERR":
		if strings.HasPrefix(msg, "ERR max number of clients") {
			return Verdict{Temporary, ReasonRedisBusy}, true
		}
		return Verdict{Permanent, ReasonRedisCommand}, true
	}
	return Verdict{Temporary, ReasonUnknownTemporary}, true
}

// NoSuchHost opens the reason of a fetch that ended because the DNS answered that its
// host's name does not exist ("dns: no such host: <name>"): a fact about the name, not a
// temporary failure. The fetcher writes it (NoSuchHostReason) and the frontier reads it
// (IsNoSuchHostReason) to end the host's URLs at once.
const NoSuchHost = "dns: no such host"

// IsNoSuchHost reports an authoritative answer that err's name does not exist (NXDOMAIN,
// or no address of the kind asked for). A resolver that failed (SERVFAIL, a timeout) is
// not one.
func IsNoSuchHost(err error) bool {
	var de *net.DNSError
	return errors.As(err, &de) && de.IsNotFound && !de.IsTimeout && !de.IsTemporary
}

// NoSuchHostReason is the outcome reason for err, when IsNoSuchHost(err).
func NoSuchHostReason(err error) string {
	var de *net.DNSError
	if errors.As(err, &de) && de.Name != "" {
		return NoSuchHost + ": " + de.Name
	}
	return NoSuchHost
}

// IsNoSuchHostReason reports an outcome reason written by NoSuchHostReason.
func IsNoSuchHostReason(reason string) bool {
	return reason == NoSuchHost || strings.HasPrefix(reason, NoSuchHost+": ")
}
