package service

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/trawl/trawl/services/parser/internal/scope"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/topology"
)

// linkSource is one page's links to follow and the id of its page message.
type linkSource struct {
	pageID string
	group  *crawlmsg.LinkGroup
}

// discoveredMsgs packs the link groups of a batch of pages into as few crawl.discovered
// messages as fit: every message of the pipeline costs NATS, the dedup service and the
// scheduler about the same whatever its size, so one message per parser batch instead of
// one per page takes most of the per-page message cost of the discovered and frontier
// stages away. A message holds groups while their estimated size stays within budget
// (a group alone always fits: Select held it to the stream's message size).
//
// A message of one group keeps the id of the page's own message, "disc:<page id>"; one of
// several is "disc:<first page id>+<digest of every page id>", so a redelivery that packs
// the same pages again is dropped by the stream's duplicate window, and one that packs
// them otherwise is a new message whose URLs the seen test finds already seen.
func discoveredMsgs(srcs []linkSource, budget int) ([]*nats.Msg, error) {
	var out []*nats.Msg
	for start := 0; start < len(srcs); {
		end, size := start, 0
		for end < len(srcs) {
			n := scope.GroupSize(*srcs[end].group)
			if end > start && size+n > budget {
				break
			}
			size += n
			end++
		}
		msg, err := discoveredMsg(srcs[start:end])
		if err != nil {
			return nil, err
		}
		out = append(out, msg)
		start = end
	}
	return out, nil
}

func discoveredMsg(srcs []linkSource) (*nats.Msg, error) {
	b := crawlmsg.DiscoveredBatch{Groups: make([]crawlmsg.LinkGroup, len(srcs))}
	for i, s := range srcs {
		b.Groups[i] = *s.group
	}
	data, err := crawlmsg.Marshal(&b)
	if err != nil {
		return nil, fmt.Errorf("parser: encode discovered: %w", err)
	}
	id := topology.DiscoveredID(srcs[0].pageID)
	if len(srcs) > 1 {
		h := sha256.New()
		for _, s := range srcs {
			h.Write([]byte(s.pageID))
			h.Write([]byte{0})
		}
		id += "+" + hex.EncodeToString(h.Sum(nil)[:16])
	}
	return natsx.NewMsg(topology.SubjectDiscovered, id, data), nil
}
