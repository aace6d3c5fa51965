// psa-check evaluates pod templates against a Pod Security Standard with the real
// k8s.io/pod-security-admission library, the code the API server's PodSecurity admission runs.
//
// Input (stdin): a JSON array of {"name": ..., "template": <PodTemplateSpec>}; unknown fields are an error,
// so a misspelt field in a builder's output cannot pass unchecked. Output (stdout): one JSON line per
// template, {"name": ..., "allowed": bool, "forbidden": "<reason (detail), ...>"}, in input order.
// Usage: psa-check [-level restricted] [-version latest]
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
)

type input struct {
	Name     string                 `json:"name"`
	Template corev1.PodTemplateSpec `json:"template"`
}

type verdict struct {
	Name      string `json:"name"`
	Allowed   bool   `json:"allowed"`
	Forbidden string `json:"forbidden,omitempty"`
}

func main() {
	level := flag.String("level", "restricted", "baseline or restricted")
	version := flag.String("version", "latest", "policy version: latest or v1.<minor>")
	flag.Parse()
	if err := run(*level, *version); err != nil {
		fmt.Fprintf(os.Stderr, "psa-check: %v\n", err)
		os.Exit(2)
	}
}

func run(levelName, versionName string) error {
	level, err := api.ParseLevel(levelName)
	if err != nil {
		return err
	}
	version, err := api.ParseVersion(versionName)
	if err != nil {
		return err
	}
	evaluator, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		return err
	}
	decoder := json.NewDecoder(bufio.NewReader(os.Stdin))
	decoder.DisallowUnknownFields()
	var inputs []input
	if err := decoder.Decode(&inputs); err != nil {
		return fmt.Errorf("cannot read the pod templates: %w", err)
	}
	out := json.NewEncoder(os.Stdout)
	for _, in := range inputs {
		results := evaluator.EvaluatePod(api.LevelVersion{Level: level, Version: version}, &in.Template.ObjectMeta, &in.Template.Spec)
		aggregate := policy.AggregateCheckResults(results)
		if err := out.Encode(verdict{Name: in.Name, Allowed: aggregate.Allowed, Forbidden: aggregate.ForbiddenDetail()}); err != nil {
			return err
		}
	}
	return nil
}
