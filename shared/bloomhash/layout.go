package bloomhash

import (
	"fmt"
	"strconv"

	"github.com/trawl/trawl/shared/redisx"
)

// The filter's Redis layout, written by dedup and read through Reader. Part t of the filter
// (Tag) lives under one hash tag: "<prefix>:{<t>}:bloom:meta", a hash of the parameters
// and layers (the Field* names), and "<prefix>:{<t>}:bloom:<layer>:<j>", bitmap j of a
// layer.

// MaxLayers bounds the layers of one part: dedup adds no more, trawlctl reads no more.
// With the smallest growth (2) it is 2^32 times the first layer's capacity.
const MaxLayers = 32

// Fields of a part's meta hash.
const (
	FieldCapacity = "n"        // the part's capacity, URLs
	FieldFPRate   = "p"        // compound false-positive rate
	FieldGrowth   = "growth"   // capacity factor from one layer to the next
	FieldTighten  = "tighten"  // rate factor from one layer to the next
	FieldKeyBits  = "key_bits" // bits per bitmap key
	FieldHash     = "hash"     // Scheme
	FieldLayers   = "layers"   // how many layers there are
	FieldParts    = "parts"    // parts of the filter, when more than one
	FieldPart     = "part"     // this part's index, when more than one
)

// LuaNames are the meta hash's field names for the filter's scripts (redisx.Names).
var LuaNames = redisx.Names("F_LAYERS", FieldLayers)

// LayerField is the meta field describing layer i: LayerValue.
func LayerField(i int) string { return "layer:" + strconv.Itoa(i) }

// CountField is the meta field counting the URLs added to layer i.
func CountField(i int) string { return "count:" + strconv.Itoa(i) }

// LayerValue is how a layer is stored in its LayerField: "<n> <m> <k> <keys>" — its
// capacity, bits, hash functions and bitmap keys.
func LayerValue(n, m uint64, k, keys int) string { return fmt.Sprintf("%d %d %d %d", n, m, k, keys) }

// ParseLayerValue reads a LayerValue.
func ParseLayerValue(s string) (n, m uint64, k, keys int, err error) {
	if _, err = fmt.Sscanf(s, "%d %d %d %d", &n, &m, &k, &keys); err != nil {
		return 0, 0, 0, 0, fmt.Errorf("bloom layer %q: %w", s, err)
	}
	return n, m, k, keys, nil
}

// PartKeyspace is the keyspace of part i of a filter split into parts, under the hash
// tag Tag(i, parts): the part's meta hash and bitmaps live there, and dedup keeps its
// memos of the part there too, so one script touches them all in one cluster slot.
func PartKeyspace(prefix string, i, parts int) redisx.Keyspace {
	return redisx.NewKeyspace(prefix, Tag(i, parts))
}

// MetaKey names the meta hash of the part tagged tag (Tag) under the deployment prefix.
func MetaKey(prefix, tag string) string { return redisx.NewKeyspace(prefix, tag).Key("bloom", "meta") }

// BitmapKey names bitmap j of layer i of the part tagged tag.
func BitmapKey(prefix, tag string, i int, j uint64) string {
	return BitmapKeyIn(redisx.NewKeyspace(prefix, tag), i, j)
}

// BitmapKeyIn is BitmapKey for the part whose keyspace is ks (PartKeyspace).
func BitmapKeyIn(ks redisx.Keyspace, i int, j uint64) string {
	return ks.Key("bloom", strconv.Itoa(i), strconv.FormatUint(j, 10))
}
