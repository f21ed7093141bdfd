"""The ledger's tables, its formats, and who may write it.

Format 4 (``PRAGMA user_version``): leases, the host's waits, each user's and each holder's past
GPU use, weights and settings. Leases and waits name their holder by its token and start ticks
(:mod:`.holders`) beside the pid and wall-clock start kept for people. A file of format 1 to 3
is brought up to format 4 in place (:func:`upgrade`); a newer one is refused.

**Only jupyter-sched writes the ledger.** Every connection a scheduler opens registers the SQL
function ``jupyter_sched_writer()``, and triggers refuse any change to the leases, the waits,
the count of changes and the settings made without it: ``DELETE FROM leases`` typed in a
``sqlite3`` shell fails ("no such function: jupyter_sched_writer") and changes nothing. A
person who drops the triggers first changes the schema, which every scheduler notices at its
next transaction (``PRAGMA schema_version``) and heals (:mod:`.healing`).

**A generation** (``settings.generation``, random) names this ledger's content: set when the
ledger is made and whenever it is healed. A file copied over the ledger in place (``cp``, the
same inode) has another generation, or a change count lower than one a scheduler saw: either
is noticed at the next transaction.

**An identity in the file's header.** ``PRAGMA user_version`` holds the format in its low
byte and a random number made with the file above it (:func:`version_of`). SQLite reads pages
through its write-ahead log, which can hide a copy put over the file in place; the header is
read from the file itself (:mod:`.damage`), so another ledger copied over this one shows there.
"""

from __future__ import annotations

import secrets
import sqlite3

from ...model.quantity import SCALE

FORMAT = 4
"""The ledger's format: 1 held leases only, 2 added the host's order among waiting work, 3 how
each lease's share is held (``held``), 4 holders named by token and start ticks, each holder's
use, the kernel a lease or wait is for and when its devices were last at work, the generation
and the writer's guard."""

APPLICATION_ID = 0x4A534C31  # "JSL1" in the SQLite header: this file is a lease ledger
_IDENTITY = 1 << 22  # identities are 1 .. 2**22 - 1, above the format's byte
WRITER = "jupyter_sched_writer"  # the SQL function every scheduler's connection registers

_LEASES = f"""
CREATE TABLE leases (
    id INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused: a stale id cannot give a new lease
    device TEXT NOT NULL,
    units INTEGER NOT NULL CHECK (units BETWEEN 1 AND {SCALE}),
    uid INTEGER NOT NULL,
    user TEXT NOT NULL,
    pid INTEGER NOT NULL,
    started REAL NOT NULL,
    host TEXT NOT NULL,
    pidns TEXT NOT NULL,
    label TEXT NOT NULL,
    task TEXT NOT NULL,
    since REAL NOT NULL,
    taken REAL NOT NULL DEFAULT 0,  -- when its holder took it (since: when its task got it)
    held TEXT NOT NULL DEFAULT '',  -- logical, mps, torch; '': a whole device, or not said
    holder TEXT NOT NULL DEFAULT '',  -- the holder's token (its file in the holders directory)
    ticks INTEGER NOT NULL DEFAULT 0,  -- the holder's start, in clock ticks since boot
    kernel TEXT NOT NULL DEFAULT '',  -- the Jupyter kernel it is held for, when known
    active REAL NOT NULL DEFAULT 0  -- when its devices were last seen at work (0: not watched)
);
CREATE TABLE changes (id INTEGER PRIMARY KEY CHECK (id = 0), count INTEGER NOT NULL);
INSERT INTO changes VALUES (0, 0);
CREATE TRIGGER a_device_is_never_held_beyond_one BEFORE INSERT ON leases
WHEN (SELECT coalesce(sum(units), 0) FROM leases WHERE device = NEW.device) + NEW.units > {SCALE}
BEGIN SELECT RAISE(ABORT, 'device held beyond 1.0'); END;
CREATE TRIGGER count_takes AFTER INSERT ON leases
BEGIN UPDATE changes SET count = count + 1; END;
CREATE TRIGGER count_gives AFTER DELETE ON leases
BEGIN UPDATE changes SET count = count + 1; END;
"""
_WAITS = f"""
CREATE TABLE waits (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    uid INTEGER NOT NULL,
    user TEXT NOT NULL,
    pid INTEGER NOT NULL,
    started REAL NOT NULL,
    host TEXT NOT NULL,
    pidns TEXT NOT NULL,
    label TEXT NOT NULL,
    task TEXT NOT NULL,
    units INTEGER NOT NULL CHECK (units BETWEEN 1 AND {SCALE}),
    count INTEGER NOT NULL CHECK (count >= 1),
    devices TEXT NOT NULL,  -- the device keys it can use, separated by newlines
    priority INTEGER NOT NULL,
    since REAL NOT NULL,
    holder TEXT NOT NULL DEFAULT '',
    ticks INTEGER NOT NULL DEFAULT 0,
    kernel TEXT NOT NULL DEFAULT ''
);
CREATE TABLE usage (uid INTEGER PRIMARY KEY, user TEXT NOT NULL, value REAL NOT NULL,
                    at REAL NOT NULL);
CREATE TABLE weights (user TEXT PRIMARY KEY, weight REAL NOT NULL CHECK (weight > 0));
CREATE TABLE settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TRIGGER count_waits AFTER INSERT ON waits
BEGIN UPDATE changes SET count = count + 1; END;
CREATE TRIGGER count_waits_ended AFTER DELETE ON waits
BEGIN UPDATE changes SET count = count + 1; END;
"""
_FOUR = """
CREATE INDEX leases_by_device ON leases (device);
CREATE INDEX leases_by_holder ON leases (holder);
CREATE TABLE holder_use (holder TEXT PRIMARY KEY, pid INTEGER NOT NULL, value REAL NOT NULL,
                         at REAL NOT NULL);
"""
GUARDED = ("leases", "waits", "changes", "settings")
TABLES = frozenset({"leases", "changes", "waits", "usage", "holder_use", "weights", "settings"})


def guards() -> str:
    """The triggers that refuse a change made without :data:`WRITER` (see the docstring)."""
    return "\n".join(
        f"CREATE TRIGGER IF NOT EXISTS only_jupyter_sched_{op.lower()}s_{table} BEFORE {op} ON "
        f"{table} WHEN {WRITER}() IS NULL BEGIN SELECT RAISE(ABORT, 'only jupyter-sched "
        f"changes the lease ledger'); END;"
        for table in GUARDED for op in ("INSERT", "UPDATE", "DELETE"))


def user_version(identity: int | None = None) -> int:
    """The header's ``user_version`` of a new file: the format, and an identity above it."""
    ident = secrets.randbelow(_IDENTITY - 1) + 1 if identity is None else identity
    return FORMAT | ident << 8


def version_of(value: int) -> tuple[int, int]:
    """``(format, identity)`` of a header's ``user_version`` (identity 0: none, as in files
    of format 3 and before)."""
    return value & 0xFF, (value >> 8) & (_IDENTITY - 1)


def register(db: sqlite3.Connection) -> None:
    """Let this connection write the ledger (the guard's function)."""
    db.create_function(WRITER, 0, _one, deterministic=True)


def _one() -> int:
    return 1


def create(db: sqlite3.Connection) -> None:
    """Make the tables in an empty file, in one transaction (another process that opens the
    same empty file at that moment waits, then finds them)."""
    db.execute("BEGIN IMMEDIATE")
    try:
        (tables,) = db.execute("SELECT count(*) FROM sqlite_master").fetchone()
        if tables == 0:
            db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            db.execute(f"PRAGMA user_version = {user_version()}")
            for statement in statements(_LEASES + _WAITS + _FOUR + guards()):
                db.execute(statement)
            new_generation(db)
    except BaseException:
        db.rollback()
        raise
    db.execute("COMMIT")


def upgrade(db: sqlite3.Connection) -> None:
    """Bring a ledger of format 1, 2 or 3 to format 4 in place, in one transaction, keeping its
    leases (their holders named the old way: by pid and start time, :mod:`.holders`).
    Kernels of an older jupyter-sched then refuse the file by its format, as any newer one."""
    db.execute("BEGIN IMMEDIATE")
    try:
        version, _ = version_of(db.execute("PRAGMA user_version").fetchone()[0])
        if version == 1:  # (another process may have upgraded it while this one waited)
            db.execute("ALTER TABLE leases ADD COLUMN taken REAL NOT NULL DEFAULT 0")
            db.execute("UPDATE leases SET taken = since")
            for statement in statements(_WAITS.replace(
                    "    holder TEXT NOT NULL DEFAULT '',\n    ticks INTEGER NOT NULL DEFAULT 0,\n"
                    "    kernel TEXT NOT NULL DEFAULT ''\n",
                    "").replace("since REAL NOT NULL,\n);", "since REAL NOT NULL\n);")):
                db.execute(statement)
        if version in (1, 2):
            db.execute("ALTER TABLE leases ADD COLUMN held TEXT NOT NULL DEFAULT ''")
        if version in (1, 2, 3):
            for table in ("leases", "waits"):
                db.execute(f"ALTER TABLE {table} ADD COLUMN holder TEXT NOT NULL DEFAULT ''")
                db.execute(f"ALTER TABLE {table} ADD COLUMN ticks INTEGER NOT NULL DEFAULT 0")
                db.execute(f"ALTER TABLE {table} ADD COLUMN kernel TEXT NOT NULL DEFAULT ''")
            db.execute("ALTER TABLE leases ADD COLUMN active REAL NOT NULL DEFAULT 0")
            db.execute("DROP TABLE IF EXISTS kernel_use")  # (by pid: now by holder)
            db.execute("DROP INDEX IF EXISTS leases_by_device")
            for statement in statements(_FOUR + guards()):
                db.execute(statement)
            new_generation(db)
            db.execute(f"PRAGMA user_version = {user_version()}")
    except BaseException:
        db.rollback()
        raise
    db.execute("COMMIT")


def restore(db: sqlite3.Connection) -> list[str]:
    """Make again what someone removed of the schema (tables, indexes, triggers, the count of
    changes), inside a transaction; the names of what was missing (a table made again is
    empty: the healing fills what it can)."""
    have = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
    missing = []
    for statement in statements(_LEASES + _WAITS + _FOUR + guards()):
        words = statement.split()
        if words[0] == "INSERT":
            continue
        if words[1] in ("TABLE", "TRIGGER", "INDEX"):
            name = words[5] if words[2:5] == ["IF", "NOT", "EXISTS"] else words[2]
            if name not in have:
                missing.append(name)
                db.execute(statement)
    if db.execute("SELECT count(*) FROM changes").fetchone()[0] == 0:
        missing.append("changes")
        db.execute("INSERT INTO changes VALUES (0, 0)")
    return missing


def new_generation(db: sqlite3.Connection) -> str:
    """A new generation for the ledger's content (inside a transaction), whose count of
    changes starts anew at a random number: a process compares the count it last read with
    the count now to know whether to read again, and a ledger made again or healed, whose
    count started from 0 or came with a copy, went through the numbers the old file had had
    (a kernel that waited then saw nothing change for seconds while shares changed hands)."""
    value = secrets.token_hex(8)
    db.execute("INSERT OR REPLACE INTO settings (key, value) VALUES ('generation', ?)", (value,))
    db.execute("UPDATE changes SET count = ?", (2**40 + secrets.randbelow(2**52),))
    return value


def statements(script: str) -> list[str]:
    # executescript() would commit the open transaction first; run the statements one by one
    parts, current = [], []
    for line in script.strip().splitlines():
        current.append(line)
        if sqlite3.complete_statement("\n".join(current)):
            parts.append("\n".join(current))
            current = []
    return parts


__all__ = ["APPLICATION_ID", "FORMAT", "GUARDED", "TABLES", "WRITER", "create", "guards",
           "new_generation", "register", "restore", "statements", "upgrade", "user_version",
           "version_of"]
