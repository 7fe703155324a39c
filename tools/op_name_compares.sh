#!/bin/sh
# Issue #55's measure "places an op name string is compared": lines of the library
# sources (tests and guide examples included, comments not filtered) where an op is
# identified by its name text: a compare of op names (`same_name`, a `ptr::eq` on
# names, `op_name() ==`, `.op.name ==`, an anchor's name against an op), a lookup of a
# definition or of nodes by name (`ops::lookup(`, `nodes_with_op(`, an `OpIds` lookup
# `by_name(`), or an index or map keyed by the name text (the registries of executors
# and vjp rules, the op index, the dispatch's tables) and the lookups into them.
# Run from the repository root: `sh tools/op_name_compares.sh | wc -l`.
grep -rnE 'same_name\(|ptr::eq\(\*?name|op_name\(\) *[!=]=|[!=]= *[a-z_.]*op_name\(\)|\.op\.name *[!=]=|a\.name *== *op\b|ops::lookup\(|nodes_with_op\(|\bids\.by_name\(|(Map|Set)<&.static str, *(&.static OpDef|Vec<(Need|AttrTest)>)|Vec<\(&.static str, *OpNodes\)>|Map<&.static str, *(Registration|\(&.static OpDef)|\.get\(([a-z_.]*\.)?op\.name\)' \
  --include=*.rs graphrw/src graphrw-cli/src graphrw-kernels/src graphrw-macros/src graphrw-ops/src
