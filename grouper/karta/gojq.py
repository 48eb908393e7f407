"""What upstream's jq engine (gojq, the Go library) can call, so a definition valid here is
valid upstream.

Taken from gojq v0.12.19 (itchyny/gojq, 2026-04-01): ``internalFuncs`` in ``func.go`` (public
names only; arities from ``argFunc0..3`` / ``mathFunc*``), the ``def``s of ``builtin.jq`` and
the formats of ``compiler.go``. libjq has more (``keys_unsorted``, ``$__loc__``, ``@base32``,
``input_filename``, ``get_search_list``, ``have_decnum``, ``lgamma_r``, ...): a call that libjq
compiles but that is not listed here — and not defined by the expression itself — is rejected.
``input_filename`` exists only in gojq's command line, not in the library upstream embeds.
"""

from __future__ import annotations

_INTERNAL = (
    "empty/0 path/1 env/0 builtins/0 input/0 modulemeta/0 debug/1 abs/0 length/0 utf8bytelength/0 "
    "keys/0 has/1 add/0 toboolean/0 tonumber/0 tostring/0 type/0 reverse/0 contains/1 inside/1 "
    "indices/1 index/1 rindex/1 startswith/1 endswith/1 ltrimstr/1 rtrimstr/1 trimstr/1 ltrim/0 "
    "rtrim/0 trim/0 explode/0 implode/0 split/1 join/1 ascii_downcase/0 ascii_upcase/0 tojson/0 "
    "fromjson/0 format/1 flatten/0 flatten/1 min/0 max/0 sort/0 unique/0 sin/0 cos/0 tan/0 asin/0 "
    "acos/0 atan/0 sinh/0 cosh/0 tanh/0 asinh/0 acosh/0 atanh/0 floor/0 round/0 nearbyint/0 rint/0 "
    "ceil/0 trunc/0 significand/0 fabs/0 sqrt/0 cbrt/0 exp/0 exp10/0 exp2/0 expm1/0 frexp/0 modf/0 "
    "log/0 log10/0 log1p/0 log2/0 logb/0 gamma/0 tgamma/0 lgamma/0 erf/0 erfc/0 j0/0 j1/0 y0/0 y1/0 "
    "atan2/2 copysign/2 drem/2 fdim/2 fmax/2 fmin/2 fmod/2 hypot/2 jn/2 nextafter/2 nexttoward/2 "
    "remainder/2 ldexp/2 scalb/2 scalbln/2 yn/2 pow/2 fma/3 infinite/0 isfinite/0 isinfinite/0 "
    "nan/0 isnan/0 isnormal/0 setpath/2 delpaths/1 getpath/1 transpose/0 bsearch/1 gmtime/0 "
    "localtime/0 mktime/0 strftime/1 strflocaltime/1 strptime/1 now/0 error/0 error/1 halt/0 "
    "halt_error/0 halt_error/1"
)
_BUILTIN_JQ = (
    "IN/1 IN/2 INDEX/1 INDEX/2 JOIN/2 JOIN/3 JOIN/4 add/1 all/0 all/1 all/2 any/0 any/1 any/2 "
    "arrays/0 booleans/0 capture/1 capture/2 combinations/0 combinations/1 del/1 finites/0 first/0 "
    "first/1 from_entries/0 fromdate/0 fromdateiso8601/0 fromstream/1 group_by/1 gsub/2 gsub/3 in/1 "
    "inputs/0 isempty/1 iterables/0 last/0 last/1 limit/2 map/1 map_values/1 match/1 match/2 "
    "max_by/1 min_by/1 normals/0 not/0 nth/1 nth/2 nulls/0 numbers/0 objects/0 paths/0 paths/1 "
    "pick/1 range/1 range/2 range/3 recurse/0 recurse/1 recurse/2 repeat/1 scalars/0 scan/1 scan/2 "
    "select/1 skip/2 sort_by/1 split/2 splits/1 splits/2 strings/0 sub/2 sub/3 test/1 test/2 "
    "to_entries/0 todate/0 todateiso8601/0 tostream/0 truncate_stream/1 unique_by/1 until/2 values/0 "
    "walk/1 while/2 with_entries/1"
)

FUNCTIONS: frozenset[tuple[str, int]] = frozenset(
    (name, int(arity)) for name, arity in (item.split("/") for item in f"{_INTERNAL} {_BUILTIN_JQ}".split())
)
FORMATS = frozenset({"@text", "@json", "@html", "@uri", "@urid", "@csv", "@tsv", "@sh", "@base64", "@base64d"})
# gojq knows $ENV (and our policy forbids it anyway); $__loc__ and $__prog_args are libjq's.
VARIABLES = frozenset({"ENV"})
VERSION = "v0.12.19"


def has_function(name: str, arity: int) -> bool:
    return (name, arity) in FUNCTIONS
