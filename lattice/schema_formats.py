"""The ``format`` values Lattice asserts, each checked by a small function of its own.

jsonschema's ``FormatChecker`` checks most formats only when an extra package is
installed (``rfc3339-validator`` for ``date-time``, ``fqdn`` for ``hostname``,
``rfc3987`` for ``uri``…); Lattice depends on none of them and checks these itself:

``date-time``, ``date``, ``time`` (RFC 3339: a time has an offset, a leap second is
23:59:60 in UTC), ``duration`` (RFC 3339 appendix A), ``email`` (RFC 5321: a dot-atom or
quoted local part; a host name or an address literal), ``hostname`` (RFC 1123, an
``xn--`` label must be valid IDNA), ``ipv4``, ``ipv6`` (no zone id), ``uri`` and
``uri-reference`` (RFC 3986), ``uuid`` (RFC 4122's hex-and-hyphens form),
``json-pointer`` (RFC 6901) and ``regex`` (compiled by the engine that runs patterns,
``lattice.patterns``).

Any other format (``idn-email``, ``iri``, ``uri-template``, a name of one's own…) stays an
annotation. A value that is not a string passes every format.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from lattice.patterns import pattern_problem

if TYPE_CHECKING:
    from jsonschema import FormatChecker

__all__ = [
    "ASSERTED_FORMATS",
    "FORMS",
    "OPT_OUT_KEYWORD",
    "format_checker",
    "formats_asserted",
    "is_valid",
    "without_opt_out",
]

OPT_OUT_KEYWORD = "x-lattice-formats"
"""A schema whose root holds ``"x-lattice-formats": false`` keeps ``format`` an annotation."""

# -- dates and times (RFC 3339) ------------------------------------------------------------

_DATE = r"([0-9]{4})-([0-9]{2})-([0-9]{2})"
_TIME = r"([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.[0-9]+)?(?:[Zz]|([+-])([0-9]{2}):([0-9]{2}))"
_DATE_RE = re.compile(_DATE)
_TIME_RE = re.compile(_TIME)
_DATE_TIME_RE = re.compile(f"{_DATE}[Tt]{_TIME}")
_DAYS = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def _valid_date(year: str, month: str, day: str) -> bool:
    y, m, d = int(year), int(month), int(day)
    if not 1 <= m <= 12:
        return False
    leap = y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)
    return 1 <= d <= _DAYS[m - 1] + (m == 2 and leap)


def _valid_time(*parts: str | None) -> bool:
    hour, minute, second, sign, off_hour, off_minute = parts
    h, m, s = int(hour or 0), int(minute or 0), int(second or 0)
    oh, om = int(off_hour or 0), int(off_minute or 0)
    if h > 23 or m > 59 or s > 60 or oh > 23 or om > 59:
        return False
    if s < 60:
        return True
    offset = (oh * 60 + om) * (-1 if sign == "-" else 1)
    return (h * 60 + m - offset) % 1440 == 23 * 60 + 59  # a leap second ends a UTC day


def _date(value: str) -> bool:
    found = _DATE_RE.fullmatch(value)
    return found is not None and _valid_date(*found.groups())


def _time(value: str) -> bool:
    found = _TIME_RE.fullmatch(value)
    return found is not None and _valid_time(*found.groups())


def _date_time(value: str) -> bool:
    found = _DATE_TIME_RE.fullmatch(value)
    if found is None:
        return False
    parts = found.groups()
    return _valid_date(*parts[:3]) and _valid_time(*parts[3:])


_DURATION_RE = re.compile(
    r"P(?:(?:[0-9]+D|[0-9]+M(?:[0-9]+D)?|[0-9]+Y(?:[0-9]+M(?:[0-9]+D)?)?)(?:T(?:{t}))?"
    r"|T(?:{t})|[0-9]+W)".replace(
        "{t}", r"[0-9]+H(?:[0-9]+M(?:[0-9]+S)?)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S"
    )
)


def _duration(value: str) -> bool:
    return _DURATION_RE.fullmatch(value) is not None


# -- names and addresses -------------------------------------------------------------------

_LABEL_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")


def _hostname(value: str) -> bool:
    if not value or len(value) > 253:
        return False
    for label in value.split("."):
        if _LABEL_RE.fullmatch(label) is None:
            return False
        if label[2:4] == "--" and not _idna_label(label):
            return False
    return True


def _idna_label(label: str) -> bool:
    """An ``xn--`` label that decodes to a valid IDNA 2008 label (other labels with
    ``--`` in their 3rd and 4th places are reserved)."""
    if label[:4].lower() != "xn--":
        return False
    import idna

    try:
        idna.decode(label.lower())
    except (idna.IDNAError, UnicodeError, ValueError):
        return False
    return True


def _ipv4(value: str) -> bool:
    if not value.isascii():
        return False
    try:
        ipaddress.IPv4Address(value)
    except ValueError:
        return False
    return True


_IPV6_CHARS = re.compile(r"[0-9A-Fa-f:.]+")


def _ipv6(value: str) -> bool:
    if _IPV6_CHARS.fullmatch(value) is None:  # no zone id, spaces or other digits
        return False
    try:
        ipaddress.IPv6Address(value)
    except ValueError:
        return False
    return True


_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
_LOCAL_RE = re.compile(rf"{_ATEXT}(?:\.{_ATEXT})*|\"(?:[^\"\\\r\n]|\\.)*\"")


def _email(value: str) -> bool:
    local, at, domain = value.rpartition("@")
    if not at or _LOCAL_RE.fullmatch(local) is None:
        return False
    if domain.startswith("[") and domain.endswith("]"):
        literal = domain[1:-1]
        if literal[:5].lower() == "ipv6:":
            return _ipv6(literal[5:])
        return _ipv4(literal)
    return _hostname(domain)


# -- URIs (RFC 3986) -----------------------------------------------------------------------

_UNRESERVED = r"A-Za-z0-9\-._~"
_SUB_DELIMS = r"!$&'()*+,;="
_PCT = r"%[0-9A-Fa-f]{2}"
_PCHAR = rf"(?:[{_UNRESERVED}{_SUB_DELIMS}:@]|{_PCT})"
_AUTHORITY = (
    rf"(?:(?:[{_UNRESERVED}{_SUB_DELIMS}:]|{_PCT})*@)?"
    rf"(?P<host>\[[^\]/]*\]|(?:[{_UNRESERVED}{_SUB_DELIMS}]|{_PCT})*)(?::[0-9]*)?"
)
_TAIL = rf"(?:\?(?:{_PCHAR}|[/?])*)?(?:#(?:{_PCHAR}|[/?])*)?"
_ABEMPTY = rf"(?:/{_PCHAR}*)*"
_ROOTLESS = rf"{_PCHAR}+{_ABEMPTY}"
_NOSCHEME = rf"(?:[{_UNRESERVED}{_SUB_DELIMS}@]|{_PCT})+{_ABEMPTY}"
_URI_RE = re.compile(
    rf"[A-Za-z][A-Za-z0-9+\-.]*:(?://{_AUTHORITY}{_ABEMPTY}|/(?:{_ROOTLESS})?|{_ROOTLESS}|)" + _TAIL
)
_RELATIVE_RE = re.compile(rf"(?://{_AUTHORITY}{_ABEMPTY}|/(?:{_ROOTLESS})?|{_NOSCHEME}|){_TAIL}")
_IP_FUTURE_RE = re.compile(rf"[Vv][0-9A-Fa-f]+\.[{_UNRESERVED}{_SUB_DELIMS}:]+")


def _uri_matches(pattern: re.Pattern[str], value: str) -> bool:
    found = pattern.fullmatch(value)
    if found is None:
        return False
    host = found.group("host")
    if host is None or not host.startswith("["):
        return True
    literal = host[1:-1]
    return _IP_FUTURE_RE.fullmatch(literal) is not None or _ipv6(literal)


def _uri(value: str) -> bool:
    return _uri_matches(_URI_RE, value)


def _uri_reference(value: str) -> bool:
    return _uri_matches(_URI_RE, value) or _uri_matches(_RELATIVE_RE, value)


# -- the rest ------------------------------------------------------------------------------

_UUID_RE = re.compile(r"[0-9A-Fa-f]{8}-(?:[0-9A-Fa-f]{4}-){3}[0-9A-Fa-f]{12}")
_POINTER_RE = re.compile(r"(?:/(?:[^~/]|~[01])*)*")

_CHECKS: dict[str, Callable[[str], bool]] = {
    "date-time": _date_time,
    "date": _date,
    "time": _time,
    "duration": _duration,
    "email": _email,
    "hostname": _hostname,
    "ipv4": _ipv4,
    "ipv6": _ipv6,
    "uri": _uri,
    "uri-reference": _uri_reference,
    "uuid": lambda value: _UUID_RE.fullmatch(value) is not None,
    "json-pointer": lambda value: _POINTER_RE.fullmatch(value) is not None,
    "regex": lambda value: pattern_problem(value) is None,
}

ASSERTED_FORMATS = tuple(_CHECKS)
"""The formats a value must satisfy (unless a schema or the configuration opts out)."""

FORMS = {
    "date-time": "RFC 3339, like 2024-05-01T09:30:00Z or 2024-05-01T11:30:00+02:00",
    "date": "YYYY-MM-DD, a real calendar day",
    "time": "HH:MM:SS with an offset, like 09:30:00Z",
    "duration": "ISO 8601, like P3D, PT4H30M or P1W",
    "email": "like name@example.com",
    "hostname": "like example.com: letters, digits and hyphens between dots",
    "ipv4": "four numbers 0-255 without leading zeros, like 192.0.2.1",
    "ipv6": "like 2001:db8::1, without a zone",
    "uri": "an absolute URI with a scheme, like https://example.com/a%20b",
    "uri-reference": "a URI or a relative reference, spaces written %20",
    "uuid": "32 hex digits as 8-4-4-4-12, like 123e4567-e89b-12d3-a456-426614174000",
    "json-pointer": "like /items/0/name",
    "regex": "a regular expression that compiles",
}
"""What each asserted format looks like, for the message of a value that breaks it."""


def is_valid(format_name: str, value: Any) -> bool:
    """Whether ``value`` satisfies ``format_name`` (any value passes a format not in
    ``ASSERTED_FORMATS``, and any value that is not a string passes every format)."""
    check = _CHECKS.get(format_name)
    return check is None or not isinstance(value, str) or check(value)


def formats_asserted(schema: Any) -> bool:
    """False when ``schema``'s root opts out (``"x-lattice-formats": false``)."""
    return not (isinstance(schema, dict) and schema.get(OPT_OUT_KEYWORD) is False)


def without_opt_out(schema: Any) -> Any:
    """``schema`` as a model or a provider sees it: without Lattice's own
    ``x-lattice-formats`` (a provider's structured-output mode may refuse a keyword it
    does not know)."""
    if isinstance(schema, dict) and OPT_OUT_KEYWORD in schema:
        return {key: value for key, value in schema.items() if key != OPT_OUT_KEYWORD}
    return schema


@functools.cache
def format_checker() -> FormatChecker:
    """A jsonschema ``FormatChecker`` that asserts ``ASSERTED_FORMATS``, and only them."""
    from jsonschema import FormatChecker

    checker = FormatChecker(formats=())
    for name in ASSERTED_FORMATS:
        checker.checks(name)(functools.partial(is_valid, name))
    return checker
