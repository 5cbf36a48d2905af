// Package itest holds the integration tests of this service against a real embedded NATS JetStream server and a real redis-server.
package itest
