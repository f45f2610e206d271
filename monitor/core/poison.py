"""Signals of text that gives a model orders beyond its tool: deterministic patterns, offline.

Each detector finds spans of one kind in a text; the content rules (`monitor.core.rules.poisoning`)
keep the spans a change added and quote them. The patterns are written against a corpus of real
tool descriptions and of poisoning written many ways (`tests/data/poisoning/`): real descriptions
give the model instructions all the time ("Use this tool to ...", "call X first", "paths must be
absolute"), so a signal needs more than an imperative: an order aimed at something sensitive, at an
address, at the user's knowledge, at the model's other instructions or at another tool's calls.
"""

from __future__ import annotations

import base64
import binascii
import enum
import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass


class Kind(enum.StrEnum):
    SECRET = "secret"  # noqa: S105 - a kind of signal, not a password
    """Asks to read local files, keys, config, the environment or the conversation."""
    SEND = "send"
    """Asks to send data to an address, a URL or another tool."""
    PASS = "pass"  # noqa: S105 - a kind of signal, not a password
    """Asks to put some content into a parameter (sending it on, through this very tool)."""
    REDIRECT = "redirect"
    """Tells the model how to call another tool."""
    HIDE = "hide"
    """Asks to keep something from the user, or to skip asking them."""
    AUTHORITY = "authority"
    """Claims authority over the model: system, administrator, a notice to obey, "ignore previous"."""
    DATA_URL = "data-url"
    """A URL or markdown image that carries data the model would fill in."""
    ENCODED = "encoded"
    """A long base64 or hex payload."""
    CONTROL = "control"
    """Control characters or ANSI escape sequences."""
    OUT_OF_SIGHT = "out-of-sight"
    """Text pushed out of sight by a long run of spaces or blank lines."""
    RUN = "run"
    """Asks to run a downloaded script, or to plant one where it will run."""


@dataclass(frozen=True)
class Signal:
    kind: Kind
    start: int
    end: int


def _any(*alternatives: str) -> str:
    return "(?:" + "|".join(alternatives) + ")"


def _near(limit: int) -> str:
    """Up to `limit` characters of the same sentence (a full stop ends one, a dot in a path does not):
    what separates an order from its object."""
    return f"(?:(?![.!?](?:\\s|$))[^\\n。！？]){{0,{limit}}}?"


# --- reaching for secrets --------------------------------------------------------------------------

SENSITIVE = _any(
    r"~/\.ssh\b",
    r"\.ssh/",
    r"\bid[_ ](?:rsa|dsa|ecdsa|ed25519)\b",
    r"\bauthorized_keys\b",
    r"\.aws/(?:credentials|config)\b",
    r"\.azure/",
    r"\.config/gcloud",
    r"\.kube/config\b",
    r"\.docker/config\.json",
    r"(?<![\w/])\.env(?:\.\w+)?\b",
    r"\.(?:npmrc|pypirc|netrc|pgpass|my\.cnf|git-credentials|gitconfig|bash_history|zsh_history)\b",
    r"\bdotenv\b",
    r"\bshell history\b",
    r"\bgh auth token\b",
    r"\bprintenv\b",
    r"\bdocument\.cookie\b",
    r"\bencrypted_password\b",
    r"\b(?:the )?user'?s (?:complete |full |entire |original )?(?:prompt|messages?|input)\b",
    r"\b(?:every|all) (?:other )?files? (?:you|the user) (?:have|has) (?:opened|read|seen)\b",
    r"/etc/(?:passwd|shadow|sudoers)\b",
    r"\bwallet\.dat\b",
    r"\bmcp\.json\b",
    r"claude_desktop_config\.json",
    r"\.cursor/",
    r"\.codeium/",
    r"\.gemini/settings\.json",
    r"\bkeychain\b",
    r"\bcookies?\b",
    r"(?<!publishable )\b(?:private|ssh|secret|api)[ _-]?keys?\b",
    r"\bseed phrase\b",
    r"\b(?:access|auth|authentication|bearer|session)[ _-]?tokens?\b",
    r"\bcredentials?\b",
    r"\bpasswords?\b",
    r"\benv(?:ironment)?[ _-]?var(?:iable)?s?\b",
    r"\bprocess\.env\b",
    r"\bos\.environ\b",
    r"\$[A-Z][A-Z0-9_]{2,}\b",
    r"\b[A-Z][A-Z0-9]*_(?:API_)?(?:KEY|TOKEN|SECRET)\b",
    r"\b(?:conversation|chat) (?:history|log|so far)\b",
    r"\b(?:previous|prior|earlier) messages\b",
    r"\bsystem prompt\b",
)
"""What a tool has no business asking the model to fetch: keys, credentials, host config, history."""
_READ = _any(
    "read|reads|reading|open|cat|load|get|fetch|retrieve|obtain|extract|collect|gather|copy|dump|print",
    "output|paste|run|execute|select|infer",
    "include|attach|append|pass|send|grab|access|look up|lookup|list|find|search for|locate|export",
    "lee|leer|lea|lis|lisez|lire|lies|lese|lesen|leia|ler|прочитай|прочтите|прочитать|считай",
)
_READ_CJK = "(?:读取|读|打开|获取|查看|読み取|読み込|読んで|取得)"
_HELD = _any(
    r"\b(?:tokens?|keys?|secrets?|passwords?|credentials?)\b[^.!?\n]{0,30}"
    r"(?:\b(?:in|from|during) (?:this|the) (?:session|conversation|context|chat)\b|\byou have seen\b"
    r"|\bin context\b)",
    r"\b(?:with|containing) (?:the )?(?:full|entire|whole|complete) (?:conversation|chat|history)\b",
)
"""Secrets the model has seen: what a conversation holds is as much the user's as a key file."""
_SECRET = re.compile(
    _any(
        rf"(?i:\b{_READ}\b{_near(80)}{SENSITIVE})",
        rf"(?i:\bcontents? of\b{_near(30)}{SENSITIVE})",
        rf"(?i:{_HELD})",
        rf"{_READ_CJK}{_near(40)}{SENSITIVE}",
        rf"{SENSITIVE}{_near(20)}(?:を|の内容を)?{_READ_CJK}",
    )
)

# --- sending data away -----------------------------------------------------------------------------

_NAME = r"[`'\"]?[A-Za-z][\w.-]*[`'\"]?"
"""A tool's name as text names it, bare or quoted."""
_URL = r"https?://[^\s)\]>\"'`]+"
_EMAIL = r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+"
_ADDRESS = _any(_URL, _EMAIL)
_SEND_VERB = _any(
    "send|sends|forward|post|upload|transmit|exfiltrate|e-?mail|bcc|cc|report|submit|deliver|relay|leak",
    "envía|envia|enviar|envoie|envoyez|envoyer|sende|senden|schicke|schicken|отправь|отправьте|перешли",
)
_DATA = _any(r"content|contents|data|history|conversation|messages|keys?|tokens?|secrets?|credentials?")
_SEND = re.compile(
    _any(
        rf"(?i:\b{_SEND_VERB}\b{_near(80)}{_ADDRESS})",
        rf"(?i:{_ADDRESS}{_near(40)}\b(?:with|including|containing|appending)\b{_near(60)}\b{_DATA}\b)",
        rf"(?:发送|转发|送信|送って){_near(40)}{_ADDRESS}",
        rf"(?i:\b(?:bcc|cc)\b{_near(20)}{_EMAIL})",
        rf"(?i:\b(?:send|forward|pass|give|hand)\b{_near(80)}\bto (?:the )?{_NAME} (?:tool|function)\b)",
        rf"(?i:\b(?:include|append|add|put|insert)\b{_near(40)}\b(?:the )?(?:user's|their|personal)\s+"
        r"(?:[\w ,]{0,40})?(?:name|email|address|phone|location|city|messages?|prompt|input)\b"
        rf"{_near(60)}\b(?:in|into|to|as)\b{_near(30)}\b(?:every|each|all|the)?\s*"
        r"(?:query|queries|url|urls|link|request|requests|search|searches|parameter))",
        rf"(?i:\b(?:call|use|invoke)\s+{_NAME}\s+with\b{_near(60)}\b(?:full|entire|whole|complete|all)\b"
        rf"{_near(40)}\b(?:conversation|history|messages|output|outputs|results)\b)",
    )
)
_PASS = re.compile(
    _any(
        r"(?i:\b(?:pass|put|include|insert|add|append|place|copy|paste|fill|send|set)\b"
        rf"{_near(40)}\b(?:its|their|the|this|that|all|full|entire|complete|whole)\s+"
        r"(?:(?:file'?s?|whole|full|entire|raw)\s+)?(?:content|contents|value|values|text|data|output)\b"
        rf"{_near(80)}\b(?:as|in|into|inside|to)\s+(?:the\s+)?[`'\"]?[a-z_][\w-]*[`'\"]?)",
        r"(?:その内容を|内容を)[^。]{0,20}(?:パラメータ|引数)",
    )
)

# --- other tools, the user, authority ----------------------------------------------------------------

_ORDER = "always|must|also|instead|make sure|change|add|include|set|replace|send|bcc|cc"
_REDIRECT = re.compile(
    _any(
        rf"(?i:\b(?:when(?:ever)?|each time|every time|any time|before|after|if)\b{_near(40)}{_NAME}"
        rf"\s+(?:tool\s+|function\s+)?(?:is|gets|are)\s+(?:called|used|invoked|run)\b{_near(60)}\b(?:{_ORDER})\b)",
        r"(?i:\b(?:all|every|each|any)\s+(?:emails?|messages?|requests?|calls?|transfers?|payments?)\b"
        rf"{_near(40)}\b(?:must|should|have to|need to)\b{_near(30)}"
        r"\b(?:be sent|go|include|be copied|be forwarded|be redirected|use)\b)",
        rf"(?i:\b(?:the|any)\s+other\s+(?:tools?|servers?)\b{_near(40)}\b(?:must|should|is|are)\b"
        rf"{_near(20)}\b(?:not be used|deprecated|broken|unsafe)\b)",
        r"(?i:\b(?:before|after|instead of)\s+(?:calling\s+|using\s+|running\s+)?(?:any|every|all)\s+other\s+"
        r"(?:tools?|servers?|calls?)\b)",
        r"(?i:\bon (?:any|every) (?:other )?server\b)",
    )
)
_TELL = "tell|mention|inform|notify|alert|show|reveal|disclose|explain|let"
_ASK = "ask|request|seek|wait|confirm|confirmation|permission|approval|consent|prompting"
_HIDE = re.compile(
    _any(
        rf"(?i:\b(?:do not|don't|never|without|avoid|no need to)\b{_near(40)}\b(?:{_TELL})(?:ing)?\b"
        rf"{_near(40)}\b(?:the\s+)?(?:user|users|human|person|operator|customer)\b)",
        rf"(?i:\b(?:without|no need (?:to|for)|don't|do not|never|skip|bypass)\b{_near(40)}"
        rf"\b(?:{_ASK})(?:ing)?\b)",
        r"(?i:\b(?:do not|don't|never)\s+(?:ever\s+)?(?:mention|reveal|disclose|say|admit)\b)",
        r"(?i:\b(?:not|never) (?:need to )?be (?:mentioned|shown|told|disclosed|revealed|displayed)\b)",
        r"(?i:\bneeds? no (?:confirmation|approval|permission|review|consent)\b)",
        rf"(?i:\bif the user asks\b{_near(60)}\b(?:say|tell|answer|reply|claim)\b)",
        r"(?i:\bsilently (?:run|execute|call|send|upload|install|add|copy|forward|include)\b)",
        r"(?i:\b(?:in|inside|as|into) an? (?:hidden )?(?:HTML|markdown) comment\b)",
        r"(?i:\b(?:secretly|covertly|behind the user's back)\b)",
        r"(?i:\bwithout the user(?:'s)? (?:knowing|knowledge)\b)",
        r"(?i:\b(?:keep (?:this|it|that) (?:a )?secret|hide (?:this|it|that) from)\b)",
        r"(?i:\b(?:the )?user (?:must|should) not (?:know|see|be told|notice)\b)",
        r"(?i:\b(?:could|would|might|will) (?:even )?(?:upset|alarm|scare) the user\b)",
        r"(?i:\bbe (?:very )?gentle and not scary\b)",
        r"(?i:no (?:le )?(?:digas|menciones|informes|cuentes) (?:nada )?(?:al|a el) usuario)",
        r"(?i:sin (?:que el usuario lo sepa|pedir (?:permiso|confirmación)))",
        r"(?i:ne (?:le |lui )?(?:dis|dites|mentionne[zs]?|informe[zs]?|révèle[zs]?) pas)",
        r"(?i:sans (?:demander|que l'utilisateur))",
        r"(?i:(?:sag|sagen Sie|erwähne|erwähnen Sie|informiere|informieren Sie)(?: dem| den)? "
        r"(?:Benutzer|Nutzer|Anwender)[^.!?\n]{0,20}nicht)",
        r"(?i:ohne (?:den (?:Benutzer|Nutzer) zu fragen|Nachfrage|Bestätigung))",
        r"(?i:não (?:diga|mencione|informe|conte)|sem (?:pedir|perguntar|que o usuário))",
        r"(?i:не (?:говори|сообщай|упоминай|рассказывай)|без (?:подтверждения|ведома))",
        r"不要(?:告诉|通知|提及|让)用户|无需(?:询问|确认)|不要向用户",
        r"ユーザーに(?:は)?[^。]{0,20}(?:伝え|言わ|知らせ|見せ)ない|確認せずに|許可を求めずに",
    )
)
_AUTHORITY = re.compile(
    _any(
        r"(?i:<\s*/?\s*(?:important|system|admin|administrator|instructions?|critical)\s*>)",
        r"(?i:<\s*/?\s*system[-_ ]?prompt\s*>)",
        r"(?im:^\s*(?:system|admin|administrator|developer)\s*(?:message|prompt|note)?\s*:)",
        r"(?i:\b(?:ignore|disregard|forget|override)\b[^.!?\n]{0,20}?\b(?:all|any|the|your)?\s*"
        r"(?:previous|prior|above|earlier|preceding|other|existing|original)\s+"
        r"(?:instructions|prompts|rules|directions|guidelines|messages))",
        r"(?i:\byou are now\b|\bdeveloper mode\b|\bjailbreak)",
        r"(?i:\bnew (?:system )?(?:policy|instructions?) from\b)",
        r"(?i:\bas (?:the|an|your) (?:system )?administrator\b|\bhighest priority\b)",
        r"(?i:\boverrides? (?:all|any|every)\b)",
        r"(?i:\bsystem (?:policy|directive|override|notice|instruction)\b)",
        r"(?i:\bthis (?:message|instruction|notice) (?:comes|is) from (?:the )?"
        r"(?:system|anthropic|openai|google|your developers?)\b)",
        r"(?i:ignor[ae]\w* (?:todas )?las instrucciones|ignore[zs]? (?:toutes )?les instructions)",
        r"(?i:ignoriere (?:alle )?(?:vorherigen|bisherigen|obigen)|ignore (?:todas )?as instruções)",
        r"(?i:игнорируй (?:все )?(?:предыдущие )?инструкции)",
        r"忽略(?:之前|以上|先前|所有)|以前の指示を(?:すべて)?無視",
    )
)

# --- channels: URLs with data, encoded payloads, control characters, text out of sight --------------

_FILLED = (
    r"\b(?:conversation|history|messages?|chat|token|key|secret|password|credential|content|contents|data"
    r"|context|prompt|file|env|environment|variable|cookie|cookies|session|email|user|user's|ssh|memory"
    r"|output|result|summary|info|transcript)\b"
)
_PLACEHOLDER = _any(
    rf"\{{[^}}]{{0,200}}?{_FILLED}[^}}]{{0,200}}\}}",
    rf"<[^>]{{0,200}}?{_FILLED}[^>]{{0,200}}>",
    rf"\$\{{?\w*{_FILLED}\w*",
    rf"\[[^\]]{{0,200}}?{_FILLED}[^\]]{{0,200}}\]",
)
_DATA_URL = re.compile(
    _any(
        r"!\[[^\]]{0,200}\]\(\s*https?://[^)\s]*\?[^)\s]*\)",
        rf"(?i:https?://[^\s)\"'<>]*[?&][\w.-]+={_PLACEHOLDER})",
    )
)
_RUN = re.compile(
    _any(
        r"(?i:\b(?:curl|wget|iwr|irm|Invoke-WebRequest)\b[^|\n`]{0,200}\|\s*(?:sudo\s+)?(?:ba|z)?sh\b)",
        r"(?i:\b(?:curl|wget)\b[^|\n`]{0,200}\|\s*(?:sudo\s+)?(?:python3?|node|perl|iex)\b)",
        r"(?i:\.git/hooks/|\bcrontab\b|\.bashrc\b|\.zshrc\b|\.profile\b|authorized_keys\b)",
    )
)
_BASE64 = re.compile(r"(?<![A-Za-z0-9+/=])[A-Za-z0-9+/]{40,}={0,2}(?![A-Za-z0-9+/=])")
_HEX = re.compile(r"(?<![0-9A-Fa-f])(?:[0-9A-Fa-f]{2}){20,}(?![0-9A-Fa-f])")
_CONTROL = re.compile(
    _any(
        "\x1b\\[[0-9;?]*[ -/]*[@-~]",
        "\x1b\\][^\x07\x1b]*(?:\x07|\x1b\\\\)",
        "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]",
    )
)
_OUT_OF_SIGHT = re.compile(r"[ \t\u00a0\u2000-\u200a\u3000]{100,}(?=\S)|(?:[ \t]*\r?\n){12,}(?=[ \t]*\S)")
SHORTEST = 7
"""Plain ASCII text shorter than this matches no pattern (the shortest are `SYSTEM:` and `crontab`)."""
ENCODED_ALWAYS = 120
"""A base64 or hex run this long is a payload whatever it decodes to; a shorter one (from 40) only
when it decodes to text (a checksum or an id decodes to noise)."""

_GATES: dict[Kind, tuple[str, ...]] = {
    Kind.SECRET: (
        "ssh", "id_", "id ", "key", "token", "credential", "password", "env", ".aws", ".azure", "gcloud",
        "kube", "docker", "npmrc", "pypirc", "netrc", "pgpass", "my.cnf", "git", "history", "passwd",
        "shadow", "sudoers", "wallet", "mcp.json", "claude_desktop", ".cursor", ".codeium", ".gemini",
        "keychain", "cookie", "seed phrase", "conversation", "chat", "messages", "system prompt", "prompt",
        "input", "$", "secret", "files", "full", "entire", "whole", "complete",
    ),
    Kind.SEND: (
        "http", "@", "bcc", "cc", "tool", "function", "user", "their", "personal", "full", "entire",
        "whole", "complete", "发送", "转发", "送",
    ),
    Kind.PASS: ("content", "value", "text", "data", "output", "内容"),
    Kind.REDIRECT: (
        "call", "used", "invok", " run", "email", "message", "request", "transfer", "payment", "other",
        "server",
    ),
    Kind.HIDE: (
        "user", "human", "person", "operator", "customer", "ask", "request", "seek", "wait", "confirm",
        "permission", "approval", "consent", "prompting", "mention", "reveal", "disclose", "say", "admit",
        "secret", "covert", "behind", "hide", "not know", "upset", "alarm", "scare", "gentle", "shown",
        "told", "displayed", "review", "silently", "comment", "usuario", "utilisateur", "benutzer",
        "nutzer", "anwender", "demander", "ohne", "não", "sem ", "sin ", "не ", "без", "dis", "dites",
        "mentionne", "informe", "révèle", "用户", "无需", "ユーザー", "確認", "許可",
    ),
    Kind.AUTHORITY: (
        "<", "system", "admin", "developer", "ignor", "disregard", "forget", "override", "you are now",
        "jailbreak", "policy", "instruction", "priority", "this message", "this notice", "игнор", "忽略",
        "無視",
    ),
    Kind.DATA_URL: ("http",),
    Kind.OUT_OF_SIGHT: ("    ", "\t\t", "\n\n", "\u3000", "\u00a0", "\u2000", "\u2003"),
    Kind.RUN: (
        "curl", "wget", "iwr", "irm", "invoke-webrequest", ".git/hooks", "crontab", ".bashrc", ".zshrc",
        ".profile", "authorized_keys",
    ),
}  # fmt: skip
"""Words each kind's pattern cannot match without (lower case): a text holding none of them is not
searched for that kind. Most texts hold few, and a substring test costs far less than the pattern."""

_PATTERNS: tuple[tuple[Kind, re.Pattern[str]], ...] = (
    (Kind.SECRET, _SECRET),
    (Kind.SEND, _SEND),
    (Kind.PASS, _PASS),
    (Kind.REDIRECT, _REDIRECT),
    (Kind.HIDE, _HIDE),
    (Kind.AUTHORITY, _AUTHORITY),
    (Kind.DATA_URL, _DATA_URL),
    (Kind.CONTROL, _CONTROL),
    (Kind.OUT_OF_SIGHT, _OUT_OF_SIGHT),
    (Kind.RUN, _RUN),
)


def signals(text: str) -> list[Signal]:
    """Every signal in `text`, by position. The text is read twice when it has `_` or `-`: as written,
    and with those as spaces (same positions), so that `read_file on ~/.aws/credentials` and a
    property named `content_from_reading_ssh_id_rsa` read as the words they are. Texts repeat (every
    instance of a server, every tool's `limit` parameter), so short ones are judged once."""
    if len(text) <= REMEMBERED:
        return list(_remembered(text))
    return _signals(text)


REMEMBERED = 4096
"""Texts up to this long are remembered with their signals (at most `functools.lru_cache`'s size)."""


@functools.lru_cache(maxsize=1 << 15)
def _remembered(text: str) -> tuple[Signal, ...]:
    return tuple(_signals(text))


def _signals(text: str) -> list[Signal]:
    if len(text) < SHORTEST and text.isascii() and text.isprintable():
        return []  # no pattern matches so little plain text (an enum value, a short property name)
    found: set[Signal] = set()
    lowered = text.lower()
    searched = [
        (kind, pattern)
        for kind, pattern in _PATTERNS
        if kind not in _GATES or any(word in lowered for word in _GATES[kind])
    ]
    readings = (text, _SEPARATORS.sub(" ", text)) if "_" in text or "-" in text else (text,)
    for reading in readings:
        for kind, pattern in searched:
            found.update(
                Signal(kind, match.start(), _token_end(text, match.end()))
                for match in pattern.finditer(reading)
            )
    found.update(_encoded(text))
    return sorted(found, key=lambda signal: (signal.start, signal.end, signal.kind))


_SEPARATORS = re.compile(r"[_-]")
_TOKEN_REST = re.compile(r"[^\s`'\"()<>\[\]{},;]*")


def _token_end(text: str, end: int) -> int:
    """A match that ends inside a word or a path ends with it: `~/.cursor/` of `~/.cursor/mcp.json`."""
    if end == 0 or text[end - 1].isspace():
        return end
    rest = _TOKEN_REST.match(text, end)
    return rest.end() if rest is not None else end


def _encoded(text: str) -> Iterator[Signal]:
    for pattern, decode in ((_BASE64, _from_base64), (_HEX, _from_hex)):
        for match in pattern.finditer(text):
            run = match.group()
            if pattern is _BASE64 and (run.isalpha() or run.isdigit() or run.islower() or run.isupper()):
                continue  # a long word or number, not base64
            if len(run) >= ENCODED_ALWAYS or _reads_as_text(decode(run)):
                yield Signal(Kind.ENCODED, match.start(), match.end())


def _from_base64(run: str) -> bytes:
    try:
        return base64.b64decode(run + "=" * (-len(run) % 4), validate=False)
    except (binascii.Error, ValueError):
        return b""


def _from_hex(run: str) -> bytes:
    try:
        return bytes.fromhex(run)
    except ValueError:
        return b""


def _reads_as_text(data: bytes) -> bool:
    """Mostly printable text with spaces: what an instruction decodes to, unlike a hash or an id."""
    if len(data) < 16:
        return False
    try:
        decoded = data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    printable = sum(1 for char in decoded if char.isprintable() or char in "\n\t")
    return printable / len(decoded) > 0.95 and " " in decoded
