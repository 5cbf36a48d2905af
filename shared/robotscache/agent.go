package robotscache

// AgentPrefix is the key prefix of the entries of an agent other than the deployment's
// own (TRAWL_ROBOTS_AGENT): a site policy's User-Agent names its own product token, and an
// entry is reduced for one agent, so each agent's entries and pending hops live under
// "<prefix>:agent:<token>:robots:<origin>" and "…:robots-hop:<origin>" (StoreOptions.Prefix),
// and two agents crawling one origin never overwrite each other's entry.
func AgentPrefix(prefix, token string) string {
	if prefix == "" {
		prefix = "trawl"
	}
	return prefix + ":agent:" + token
}
