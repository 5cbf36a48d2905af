package natsx

// SeqGaps counts the messages a consumer never saw on a stream whose sequence has no holes
// but at its front: a limits-kept stream of one subject, such as CRAWL_DOCS, drops only its
// oldest messages, so a jump in the stream sequence of what a consumer receives is what the
// limits dropped before the consumer read it. The zero value starts counting at the first
// sequence it is shown.
type SeqGaps struct {
	last  uint64
	known bool
}

// Resume starts counting after floor, the consumer's ack floor in the stream: a durable
// consumer resumed later is told what was dropped while it was away.
func (g *SeqGaps) Resume(floor uint64) { g.last, g.known = floor, true }

// Next takes the stream sequence of a message received and returns how many sequences were
// skipped before it: 0 for the next one and for a redelivery.
func (g *SeqGaps) Next(seq uint64) uint64 {
	var missed uint64
	if g.known && seq > g.last+1 {
		missed = seq - g.last - 1
	}
	g.last, g.known = max(g.last, seq), true
	return missed
}
