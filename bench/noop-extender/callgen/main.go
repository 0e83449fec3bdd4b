// Command callgen sends one request body to an extender verb, sequentially, over one
// keep-alive connection of Go's net/http client (as kube-scheduler's extender client
// sends its calls), and prints per call: wall time, this process's CPU time, and the
// round trip's p50 and p99, in microseconds. bench/floor_calls.py runs it.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"sort"
	"syscall"
	"time"
)

func cpuSeconds() float64 {
	var usage syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &usage); err != nil {
		log.Fatal(err)
	}
	return float64(usage.Utime.Nano()+usage.Stime.Nano()) / 1e9
}

func main() {
	url := flag.String("url", "", "the verb's URL, e.g. http://127.0.0.1:8888/filter")
	bodyPath := flag.String("body", "", "file holding the request body")
	calls := flag.Int("calls", 3000, "calls measured")
	warmup := flag.Int("warmup", 200, "calls before measuring")
	flag.Parse()
	body, err := os.ReadFile(*bodyPath)
	if err != nil {
		log.Fatal(err)
	}
	client := &http.Client{Timeout: 5 * time.Second}
	call := func() {
		request, _ := http.NewRequest(http.MethodPost, *url, bytes.NewReader(body))
		request.Header.Set("Content-Type", "application/json")
		response, err := client.Do(request)
		if err != nil {
			log.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, response.Body)
		_ = response.Body.Close()
		if response.StatusCode != http.StatusOK {
			log.Fatalf("%s: %s", *url, response.Status)
		}
	}
	for range *warmup {
		call()
	}
	latencies := make([]float64, *calls)
	cpuBefore := cpuSeconds()
	start := time.Now()
	for i := range latencies {
		sent := time.Now()
		call()
		latencies[i] = float64(time.Since(sent).Nanoseconds()) / 1e3
	}
	wall := time.Since(start).Seconds()
	cpu := cpuSeconds() - cpuBefore
	sort.Float64s(latencies)
	n := float64(*calls)
	fmt.Printf("%.1f %.1f %.1f %.1f\n", 1e6*wall/n, 1e6*cpu/n, latencies[*calls/2], latencies[*calls*99/100])
}
