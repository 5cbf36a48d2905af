// Package itest holds the renderer's integration tests: a real headless Chromium, an
// embedded NATS JetStream server, a real redis-server and httptest sites.
package itest
