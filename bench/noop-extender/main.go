// Command noop-extender is the fastest extender bench/e2e.py can put beside
// kube-scheduler: it decodes each filter request and passes every node, and
// gives no scores. Its throughput is the floor that the extender mechanism
// itself (an HTTP round trip and JSON on both sides, per scheduling cycle)
// sets for any extender, Muster included.
package main

import (
	"encoding/json"
	"flag"
	"log"
	"net/http"
)

type extenderArgs struct {
	Pod       json.RawMessage
	NodeNames *[]string
}

type filterResult struct {
	NodeNames                  *[]string
	FailedNodes                map[string]string
	FailedAndUnresolvableNodes map[string]string
	Error                      string
}

// decode reads the request's ExtenderArgs, answering 400 if they do not parse.
func decode(w http.ResponseWriter, r *http.Request) (extenderArgs, bool) {
	var args extenderArgs
	if err := json.NewDecoder(r.Body).Decode(&args); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return args, false
	}
	w.Header().Set("Content-Type", "application/json")
	return args, true
}

func filter(w http.ResponseWriter, r *http.Request) {
	if args, ok := decode(w, r); ok {
		_ = json.NewEncoder(w).Encode(filterResult{NodeNames: args.NodeNames})
	}
}

func prioritize(w http.ResponseWriter, r *http.Request) {
	if _, ok := decode(w, r); ok {
		_, _ = w.Write([]byte("[]"))
	}
}

func main() {
	addr := flag.String("listen", "127.0.0.1:8888", "address to serve on")
	flag.Parse()
	http.HandleFunc("POST /filter", filter)
	http.HandleFunc("POST /prioritize", prioritize)
	http.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	log.Fatal(http.ListenAndServe(*addr, nil))
}
