package main

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"strata/icetable"
	"strata/icetable/restcat"
	"strata/metadata"
)

// icebergCatalog is the Iceberg REST catalog the admin API serves under
// /iceberg, or nil when iceberg.enabled is off (docs/iceberg.md, "The
// catalog"). Its tables are tiering's (icebergTables); which exist is
// what the topics' metadata says, in etcd in a cluster.
func icebergCatalog(cfg *Config, tables *icetable.Tables, meta metadata.Cluster, reg prometheus.Registerer, log *slog.Logger) http.Handler {
	if tables == nil {
		return nil
	}
	s := &restcat.Server{
		Tables:    tables,
		Namespace: cfg.Iceberg.REST.Namespace,
		Topics: func(ctx context.Context) ([]string, error) {
			topics, err := meta.Topics(ctx)
			return slices.Collect(maps.Keys(topics)), err
		},
		FileIO:     readerFileIO(cfg),
		Log:        log.With("component", "iceberg-rest"),
		Registerer: reg,
	}
	return s.Handler()
}

// readerFileIO is what a reader needs to open the tables' files, in the
// FileIO property names Java's S3FileIO, pyiceberg and iceberg-go read.
// Local folders and HDFS need nothing: the files' URIs say it all.
func readerFileIO(cfg *Config) map[string]string {
	c := cfg.Cold.S3
	if cfg.Cold.Backend != "s3" {
		return nil
	}
	io := map[string]string{}
	endpoint := cfg.Iceberg.REST.S3Endpoint
	if endpoint == "" && c.Endpoint != "" { // host:port (validate refuses a scheme)
		endpoint = map[bool]string{true: "https://", false: "http://"}[c.TLS] + c.Endpoint
	}
	if endpoint != "" {
		io["s3.endpoint"] = endpoint
	}
	region := c.Region
	if region == "" {
		region = "us-east-1" // what the S3 backend signs with when none is set
	}
	io["s3.region"], io["client.region"] = region, region
	// Readers address the bucket as strata does: by path unless
	// cold.s3.addressing is "virtual" (its default, "", is path; "auto" is
	// path but for AWS's own endpoints, where path still works).
	path := c.Addressing != "virtual"
	io["s3.path-style-access"] = fmt.Sprint(path)
	io["s3.force-virtual-addressing"] = fmt.Sprint(!path)
	if cfg.Iceberg.REST.VendCredentials && c.AccessKey != "" {
		io["s3.access-key-id"], io["s3.secret-access-key"] = c.AccessKey, c.SecretKey
	}
	return io
}

func (r IcebergREST) validate() error {
	if r.Namespace == "" || strings.ContainsAny(r.Namespace, ".\x1f/") {
		return fmt.Errorf("iceberg.rest.namespace %q: want one level, a name without '.', '/' or the unit separator", r.Namespace)
	}
	return nil
}
