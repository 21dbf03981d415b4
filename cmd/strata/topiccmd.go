package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"strata/api/admin"
)

// topicCmd is `strata topic describe T` and `strata topic alter T --set
// key=value [--delete key]`, through the running service's admin API.
func topicCmd(args []string, out io.Writer) error {
	const usage = "usage: strata topic describe TOPIC [--admin-addr HOST:PORT] | strata topic alter TOPIC --set key=value [--delete key] [--admin-addr HOST:PORT]"
	if len(args) < 2 || (args[0] != "describe" && args[0] != "alter") || strings.HasPrefix(args[1], "-") {
		return errors.New(usage)
	}
	verb, topic := args[0], args[1]
	fs := flag.NewFlagSet("topic "+verb, flag.ContinueOnError)
	addr := fs.String("admin-addr", "127.0.0.1:9644", "the running service's admin address")
	var sets, dels multiFlag
	if verb == "alter" {
		fs.Var(&sets, "set", "key=value: a topic config to set; repeatable")
		fs.Var(&dels, "delete", "key: a topic config to remove (back to the broker's); repeatable")
	}
	if err := fs.Parse(args[2:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("topic %s: unexpected argument %q\n%s", verb, fs.Arg(0), usage)
	}
	var v admin.TopicView
	if verb == "describe" {
		if err := adminCall(*addr, http.MethodGet, "/v1/topics/"+topic, nil, &v); err != nil {
			return err
		}
		printTopic(out, v)
		return nil
	}
	change := map[string]any{"set": map[string]string{}, "delete": []string(dels)}
	for _, s := range sets {
		k, val, ok := strings.Cut(s, "=")
		if !ok || k == "" {
			return fmt.Errorf("topic alter: --set %q: want key=value", s)
		}
		change["set"].(map[string]string)[k] = val
	}
	if len(sets) == 0 && len(dels) == 0 {
		return errors.New("topic alter: nothing to change: give --set key=value or --delete key")
	}
	if err := adminCall(*addr, http.MethodPatch, "/v1/topics/"+topic+"/configs", change, &v); err != nil {
		return err
	}
	printTopic(out, v)
	return nil
}

func printTopic(out io.Writer, v admin.TopicView) {
	fmt.Fprintf(out, "topic %s\n\nconfigs:\n", v.Topic)
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	for _, c := range v.Configs {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", c.Name, c.Value, c.Source)
	}
	tw.Flush()
	fmt.Fprintf(out, "\npartitions:\n")
	tw = tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  PARTITION\tLOW\tHIGH\tHOT\tWARM\tCOLD\tTIERED_UP_TO\tTIERING_LAG\tOLDEST_UNTIERED")
	for _, p := range v.Partitions {
		oldest := "-"
		if !p.OldestUntiered.IsZero() {
			oldest = time.Since(p.OldestUntiered).Round(time.Second).String() + " ago"
		}
		if p.Error != "" {
			fmt.Fprintf(tw, "  %d\t(%s)\n", p.Partition, p.Error)
			continue
		}
		fmt.Fprintf(tw, "  %d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", p.Partition, p.LowWatermark, p.HighWatermark, p.HotBytes, p.WarmBytes, p.ColdBytes,
			p.TieredUpTo, p.TieringLagBytes, oldest)
	}
	tw.Flush()
}

// adminCall sends one request to the running service's admin API (over
// HTTPS with STRATA_ADMIN_CA, with STRATA_ADMIN_TOKEN) and decodes the
// answer into v; an error answer becomes the error.
func adminCall(addr, method, path string, body, v any) error {
	resp, err := adminRequest(addr, method, path, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return json.Unmarshal(raw, v)
}

// adminRequest sends one request to the admin API and returns its answer
// if it is 200 OK, or the error the answer names.
func adminRequest(addr, method, path string, body any) (*http.Response, error) {
	scheme, client := "http", http.DefaultClient
	if ca := os.Getenv("STRATA_ADMIN_CA"); ca != "" { // admin_tls is on
		var err error
		if client, err = httpsClient(ca); err != nil {
			return nil, err
		}
		scheme = "https"
	}
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(raw)
	}
	req, _ := http.NewRequest(method, scheme+"://"+addr+path, rd)
	if tok := os.Getenv("STRATA_ADMIN_TOKEN"); tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("no strata admin API at %s: %w", addr, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var e struct{ Error string }
		if json.Unmarshal(raw, &e) == nil && e.Error != "" {
			return nil, errors.New(e.Error)
		}
		return nil, fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(raw))
	}
	return resp, nil
}
