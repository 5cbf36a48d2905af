package synthweb

import (
	"encoding/json"
	"net/http"
)

// Snapshot is what LogHandler serves: the web's seeds, what a correct crawl to a depth
// fetches, and the request log so far.
type Snapshot struct {
	Seeds    []string    `json:"seeds"`
	Expected Expectation `json:"expected"`
	Requests []Request   `json:"requests"`
}

// LogHandler serves GET /log: a Snapshot as JSON, with Expected(maxDepth). A web run in a
// container (cmd/trawl-synthweb) is judged from outside it this way, from the server's own
// log.
func (w *Web) LogHandler(maxDepth int) http.Handler {
	exp := w.Expected(maxDepth)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /log", func(rw http.ResponseWriter, _ *http.Request) {
		rw.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(rw).Encode(Snapshot{Seeds: w.Seeds(), Expected: exp, Requests: w.Requests()})
	})
	return mux
}
