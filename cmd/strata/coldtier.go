package main

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"strata/tiering/objstore"
	"strata/tiering/objstore/hdfs"
	"strata/tiering/objstore/local"
	"strata/tiering/objstore/s3"
)

// openColdTier builds the configured backend, wrapped with retries and
// metrics. This is the one place that picks a concrete object store.
func openColdTier(c Cold, reg prometheus.Registerer) (objstore.Bucket, error) {
	var b objstore.Bucket
	var err error
	switch c.Backend {
	case "local":
		b, err = local.New(c.Local.Dir)
	case "s3":
		b, err = s3.New(s3.Config{
			Endpoint:   c.S3.Endpoint,
			Region:     c.S3.Region,
			Bucket:     c.S3.Bucket,
			Prefix:     c.S3.Prefix,
			AccessKey:  c.S3.AccessKey,
			SecretKey:  c.S3.SecretKey,
			TLS:        c.S3.TLS,
			Addressing: c.S3.Addressing,
			PartSize:   uint64(c.S3.PartSize),
		})
	case "hdfs":
		b, err = hdfs.New(hdfs.Config{NameNodes: c.HDFS.NameNodes, Root: c.HDFS.Root, User: c.HDFS.User})
	}
	if err != nil {
		return nil, err
	}
	b = objstore.WithRetries(b, objstore.RetryPolicy{
		Attempts:      c.Retry.Attempts,
		Timeout:       time.Duration(c.Retry.Timeout),
		UploadTimeout: time.Duration(c.Retry.UploadTimeout),
	})
	return objstore.NewMetrics(reg).Instrument(b), nil
}
