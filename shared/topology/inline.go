package topology

// PageInlineMax is how many payload octets a page message on crawl.pages may carry inline
// beside metaLen octets its publisher measured apart (its encoded Trawl-Meta, and any
// payload that travels whatever is decided): bodyInlineMax (TRAWL_BODY_INLINE_MAX), lowered
// so that the message, with the other headers (ExtraHeaderRoom), stays within the server's
// max_payload and the stream's MaxMsgSize, which both count the headers. Never negative:
// at 0 every body goes by reference. The fetcher and the renderer size their pages by it.
func PageInlineMax(bodyInlineMax, maxPayload int64, maxMsgSize int32, metaLen int) int64 {
	limit := min(maxPayload, int64(maxMsgSize)) - int64(metaLen) - ExtraHeaderRoom
	return max(0, min(bodyInlineMax, limit))
}
