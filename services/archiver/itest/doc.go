// Package itest holds the integration tests of the archiver against a real embedded NATS
// JetStream server and a real redis-server; the files written are read back with
// devstack/warccheck, a reader that shares no code with the writer.
package itest
