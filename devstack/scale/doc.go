// Package scale holds `make bench-scale` (scale_test.go, build tag scale): the frontier
// and dedup at 10⁵, 10⁶ and 10⁷ URLs on one machine, their rates against the queue's size,
// bytes per URL in Redis and NATS, every process's memory and the restart times; and, run by
// name, TestRecrawlSplit (recrawlsplit_test.go): each NATS server's share of the recrawl
// schedules with one stream and with three.
package scale
