// Command etcd is a minimal single-member etcd for the local test control plane:
// an embedded go.etcd.io/etcd/server/v3 listening on 127.0.0.1 only.
//
//	etcd -data-dir DIR -client-port N -peer-port M
package main

import (
	"flag"
	"fmt"
	"log"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

func mustURL(port int) []url.URL {
	u, err := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", port))
	if err != nil {
		log.Fatal(err)
	}
	return []url.URL{*u}
}

func main() {
	dataDir := flag.String("data-dir", "", "data directory (required)")
	clientPort := flag.Int("client-port", 2379, "client port on 127.0.0.1")
	peerPort := flag.Int("peer-port", 2380, "peer port on 127.0.0.1")
	logLevel := flag.String("log-level", "warn", "zap log level")
	quotaBytes := flag.Int64("quota-backend-bytes", 8<<30, "backend quota in bytes")
	flag.Parse()
	if *dataDir == "" {
		log.Fatal("-data-dir is required")
	}

	cfg := embed.NewConfig()
	cfg.Name = "devcluster"
	cfg.Dir = *dataDir
	cfg.LogLevel = *logLevel
	cfg.ListenClientUrls = mustURL(*clientPort)
	cfg.AdvertiseClientUrls = mustURL(*clientPort)
	cfg.ListenPeerUrls = mustURL(*peerPort)
	cfg.AdvertisePeerUrls = mustURL(*peerPort)
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.QuotaBackendBytes = *quotaBytes
	// A throwaway test store: keep the history small, skip fsync-heavy defaults where possible.
	cfg.AutoCompactionMode = "periodic"
	cfg.AutoCompactionRetention = "5m"
	cfg.UnsafeNoFsync = true

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		log.Fatalf("start etcd: %v", err)
	}
	select {
	case <-e.Server.ReadyNotify():
		fmt.Fprintf(os.Stderr, "etcd ready on http://127.0.0.1:%d\n", *clientPort)
	case <-time.After(60 * time.Second):
		e.Server.Stop()
		log.Fatal("etcd did not become ready within 60s")
	}

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case s := <-sig:
		fmt.Fprintf(os.Stderr, "etcd: %v, shutting down\n", s)
	case err := <-e.Err():
		log.Fatalf("etcd error: %v", err)
	}
	e.Close()
}
