"""The server-side Lua scripts: each runs atomically on the node that owns its keys.

Every script reads and checks everything before its first write, because Redis does
not roll a script back when a command in it fails. Scripts touch only the keys passed
in KEYS, except the standalone-only index upkeep (KEYS[5] given), where the session's
user index is named by the session hash itself; that branch never runs in a cluster.

Writes carry a random token: a retry of a write that already landed (redis-py retries
after a dropped connection, or the caller saves again after an ambiguous failure) is
recognised and reported as done instead of as a conflict, so a save is never applied
twice. The hash's ``t`` holds the latest write's token. Saves, compactions and rewinds
also keep theirs in the session's token ring (``:t``, a string of `TOKENS_KEPT` slots
of 32 characters): the write that makes version *v* puts its token in slot *v* mod
`TOKENS_KEPT` with one ``SETRANGE``, so the ring holds exactly the tokens of the
latest `TOKENS_KEPT` of them without the script reading it. It is read only when the
stored version is not the one the request expects: a token is kept only with the
version its write made, versions only grow, and a new life of the id starts with no
ring, so a request whose expected version still matches cannot have landed.

A release before the ring kept every token in ``t`` (newest first, 32 characters
each); such a ``t`` is searched too, and moved into the ring by the session's next
write (`_TOKENS`).
"""

from __future__ import annotations

from agentsessions.backend import TOKENS_KEPT

__all__ = [
    "ARCHIVED",
    "COMPACT",
    "CREATE",
    "DELETE",
    "FORK",
    "HASH_FIELDS",
    "LOAD",
    "LOAD_SINCE",
    "MOVE_INDEX_ENTRY",
    "REWIND",
    "SAVE",
]

#: The hash fields a load and a listing read, in this order (``fs``, ``fv``, ``fe``: a
#: fork's origin, absent for a session that is no fork).
HASH_FIELDS = ("id", "u", "s", "v", "c", "m", "x", "n", "l", "fs", "fv", "fe")

# ``l`` holds "<lineage>:<version it was written with>" (`stamp_lineage`, read back
# with `unstamp_lineage`). A release that predates the
# lineage saves without touching it; the version then no longer matches and the
# lineage reads as unknown (""), so such a save can never pass for an append.

# KEYS: hash, events. ARGV: now (us), how many newest events (-1: all), the most
# events the script returns itself (-1: no limit).
# Returns nil if absent or expired, else {HMGET of HASH_FIELDS as one JSON array (false
# for a missing field), event texts}. One string instead of nine: redis-py parses
# replies in Python, element by element, and the record is read on every load.
# When more events are wanted than the script returns itself, only {record}: the
# caller reads them with plain commands instead (see SessionManager._load), because
# an LRANGE inside a script becomes a Lua table and then a reply again. ``n`` is the
# list's length (every script writes both together), as in SAVE.
LOAD = """
local rec = redis.call('HMGET', KEYS[1], 'id', 'u', 's', 'v', 'c', 'm', 'x', 'n', 'l',
                      'fs', 'fv', 'fe')
if not rec[1] then return false end
if rec[7] and tonumber(rec[7]) <= tonumber(ARGV[1]) then return false end
local last = tonumber(ARGV[2])
if last == 0 then return {cjson.encode(rec), {}} end
local stored = tonumber(rec[8])
local wanted = stored
if last > 0 and last < stored then wanted = last end
local limit = tonumber(ARGV[3])
if limit >= 0 and wanted > limit then return {cjson.encode(rec)} end
if last < 0 then
  return {cjson.encode(rec), redis.call('LRANGE', KEYS[2], 0, -1)}
end
return {cjson.encode(rec), redis.call('LRANGE', KEYS[2], -last, -1)}
"""

# KEYS: hash, events. ARGV: now (us), the caller's event count, its lineage.
# Returns what LOAD returns: the events after the caller's while the lineage is
# unchanged, else all of them (see SessionManager._load_since).
LOAD_SINCE = """
local rec = redis.call('HMGET', KEYS[1], 'id', 'u', 's', 'v', 'c', 'm', 'x', 'n', 'l',
                      'fs', 'fv', 'fe')
if not rec[1] then return false end
if rec[7] and tonumber(rec[7]) <= tonumber(ARGV[1]) then return false end
local start = 0
if rec[9] == ARGV[3] .. ':' .. rec[4] and tonumber(rec[8]) >= tonumber(ARGV[2]) then
  start = tonumber(ARGV[2])
end
return {cjson.encode(rec), redis.call('LRANGE', KEYS[2], start, -1)}
"""

# KEYS: hash, events, archive, tokens [, global index [, user index]] (indexes:
#       standalone only).
# ARGV: now, token, id, user ('' = none), state, created, expires (''), pexpireat (''),
#       global index member, user index key, version, updated, event count, lineage,
#       fork source, fork version, fork cut event, fork index key ('' each: no fork),
#       event texts...
# A create passes version 1, updated = created and no events; a restore the session's own.
# Returns {1} when created, {0, created_at of the live session} when the id is taken; in
# a cluster (no index keys), {1, owner, created_at, fork index} of the expired life it
# replaced, whose index entries the client then drops (as after DELETE).
CREATE = """
local cur = redis.call('HMGET', KEYS[1], 't', 'x', 'c', 'u', 'uk', 'fk')
local replaced = nil
if cur[1] then
  if cur[1] == ARGV[2] then return {1} end
  if not cur[2] or tonumber(cur[2]) > tonumber(ARGV[1]) then return {0, cur[3]} end
  redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
  if KEYS[5] then
    redis.call('ZREM', KEYS[5], ARGV[3] .. '\\0' .. (cur[4] or ''))
    if cur[5] then redis.call('ZREM', cur[5], ARGV[3]) end
    if cur[6] then redis.call('ZREM', cur[6], ARGV[3]) end
  else
    replaced = {1, cur[4], cur[3], cur[6]}
  end
end
local fields = {'id', ARGV[3], 's', ARGV[5], 'v', ARGV[11], 'c', ARGV[6], 'm', ARGV[12],
                'n', ARGV[13], 't', ARGV[2], 'l', ARGV[14] .. ':' .. ARGV[11]}
if ARGV[4] ~= '' then
  fields[#fields + 1] = 'u'; fields[#fields + 1] = ARGV[4]
  fields[#fields + 1] = 'uk'; fields[#fields + 1] = ARGV[10]
end
if ARGV[7] ~= '' then
  fields[#fields + 1] = 'x'; fields[#fields + 1] = ARGV[7]
end
-- A restored fork keeps its origin: ARGV[15..18] = source, version, cut event ('' for
-- none), fork index key; ARGV[15] == '' for a session that is no fork.
if ARGV[15] ~= '' then
  for i, name in ipairs({'fs', 'fv', 'fe', 'fk'}) do
    if ARGV[14 + i] ~= '' then
      fields[#fields + 1] = name; fields[#fields + 1] = ARGV[14 + i]
    end
  end
end
local first, last = 19, #ARGV
while first <= last do
  -- unpack() is bounded by the Lua C stack: push in slices.
  local stop = math.min(first + 999, last)
  redis.call('RPUSH', KEYS[2], unpack(ARGV, first, stop))
  first = stop + 1
end
redis.call('HSET', KEYS[1], unpack(fields))
if ARGV[8] ~= '' then
  redis.call('PEXPIREAT', KEYS[1], ARGV[8])
  if last >= 19 then redis.call('PEXPIREAT', KEYS[2], ARGV[8]) end
end
if KEYS[5] then
  redis.call('ZADD', KEYS[5], ARGV[6], ARGV[9])
  if KEYS[6] then redis.call('ZADD', KEYS[6], ARGV[6], ARGV[3]) end
  if ARGV[18] ~= '' then redis.call('ZADD', ARGV[18], ARGV[6], ARGV[3]) end
end
return replaced or {1}
"""

# What SAVE, COMPACT and REWIND share. seen(text, token): whether *text* holds *token*
# at a token boundary (one plain substring search, in C; hex tokens could match across
# two neighbours). keep_token(...): the token into its version's ring slot; a ``t``
# longer than one token was written by a release before the ring (newest first, the
# i-th with the stored version minus i): its latest tokens move into the ring first,
# once, so a retry of a save made before the upgrade is still recognised.
_TOKENS = """local function seen(text, token)
  if not text or #token ~= 32 then return false end
  local at = string.find(text, token, 1, true)
  while at do
    if at % 32 == 1 then return true end
    at = string.find(text, token, at + 1, true)
  end
  return false
end
local function landed(old, token)
  return seen(old, token) or seen(redis.call('GET', KEYS[4]), token)
end
local function keep_token(old, stored, version, token)
  if #old > 32 and #old % 32 == 0 then
    stored = tonumber(stored)
    for i = 0, math.min(#old / 32, {kept} - 1) - 1 do
      redis.call('SETRANGE', KEYS[4], ((stored - i) % {kept}) * 32,
                 string.sub(old, i * 32 + 1, i * 32 + 32))
    end
  end
  redis.call('SETRANGE', KEYS[4], (tonumber(version) % {kept}) * 32, token)
end
""".replace("{kept}", str(TOKENS_KEPT))

# KEYS: hash, events, archive, tokens. ARGV: now, expected version, token, keep, state,
#       version, updated, expires (''), lineage ('': the expected one), expected lineage
#       ('' skips its check), new event texts...
# Returns 1 saved (or saved before: its token is kept), 0 absent or expired, -1 version
# conflict, or a copy of an earlier life of the id: the expected version but another
# lineage (nothing written).
SAVE = (
    _TOKENS
    + """local cur = redis.call('HMGET', KEYS[1], 't', 'v', 'x', 'n', 'l')
if not cur[1] then return 0 end
local expired = cur[3] and tonumber(cur[3]) <= tonumber(ARGV[1])
if cur[2] ~= ARGV[2] or (ARGV[10] ~= '' and cur[5] ~= ARGV[10] .. ':' .. ARGV[2]) then
  if landed(cur[1], ARGV[3]) then return 1 end
  if expired then return 0 end
  return -1
end
if expired then return 0 end
keep_token(cur[1], cur[2], ARGV[6], ARGV[3])
local keep = tonumber(ARGV[4])
-- 'n' is the length of the events list (every script writes both together).
local stored = cur[4] and tonumber(cur[4]) or redis.call('LLEN', KEYS[2])
if keep < stored then
  if keep == 0 then
    redis.call('DEL', KEYS[2])
  else
    redis.call('LTRIM', KEYS[2], 0, keep - 1)
  end
end
local first, last = 11, #ARGV
while first <= last do
  -- unpack() is bounded by the Lua C stack: push in slices.
  local stop = math.min(first + 999, last)
  redis.call('RPUSH', KEYS[2], unpack(ARGV, first, stop))
  first = stop + 1
end
local lineage = ARGV[9]
if lineage == '' then lineage = ARGV[10] end
local count = keep + #ARGV - 10
if ARGV[8] ~= '' then
  -- PEXPIREAT takes milliseconds: expires_at rounded up (exact in a double).
  local at = string.format('%.0f', math.floor((tonumber(ARGV[8]) + 999) / 1000))
  redis.call('HSET', KEYS[1], 's', ARGV[5], 'v', ARGV[6], 'm', ARGV[7], 'n', count,
             't', ARGV[3], 'l', lineage .. ':' .. ARGV[6], 'x', ARGV[8])
  redis.call('PEXPIREAT', KEYS[1], at)
  redis.call('PEXPIREAT', KEYS[2], at)
  redis.call('PEXPIREAT', KEYS[3], at)
  redis.call('PEXPIREAT', KEYS[4], at)
else
  redis.call('HSET', KEYS[1], 's', ARGV[5], 'v', ARGV[6], 'm', ARGV[7], 'n', count,
             't', ARGV[3], 'l', lineage .. ':' .. ARGV[6])
  if cur[3] then
    -- Keys carry a TTL only while the hash holds 'x' (every script sets both
    -- together), so a session saved without ttl before has nothing to persist.
    redis.call('HDEL', KEYS[1], 'x')
    redis.call('PERSIST', KEYS[1])
    redis.call('PERSIST', KEYS[2])
    redis.call('PERSIST', KEYS[3])
    redis.call('PERSIST', KEYS[4])
  end
end
return 1
"""
)

# What COMPACT and REWIND share (ARGV: now, expected version, token, ..., new version at
# 5, expires and pexpireat at 7 and 8): the checks before writing, as SAVE's (a token
# already kept means the write landed: 1; expired 0; another version -1), and the
# token kept; after the write, the session's expiry set on, or taken off, all four
# keys together, and the answer 1. *lineage* is the script's expected-lineage check.
_GUARD = """if not cur[1] then return 0 end
local expired = cur[3] and tonumber(cur[3]) <= tonumber(ARGV[1])
if cur[2] ~= ARGV[2] or not lineage_ok then
  if landed(cur[1], ARGV[3]) then return 1 end
  if expired then return 0 end
  return -1
end
if expired then return 0 end
keep_token(cur[1], cur[2], ARGV[5], ARGV[3])
"""
_EXPIRE = """if ARGV[7] ~= '' then
  redis.call('HSET', KEYS[1], 'x', ARGV[7])
  redis.call('PEXPIREAT', KEYS[1], ARGV[8])
  redis.call('PEXPIREAT', KEYS[2], ARGV[8])
  redis.call('PEXPIREAT', KEYS[3], ARGV[8])
  redis.call('PEXPIREAT', KEYS[4], ARGV[8])
else
  redis.call('HDEL', KEYS[1], 'x')
  redis.call('PERSIST', KEYS[1])
  redis.call('PERSIST', KEYS[2])
  redis.call('PERSIST', KEYS[3])
  redis.call('PERSIST', KEYS[4])
end
return 1
"""

# KEYS: hash, events, archive, tokens. ARGV: now, expected version, token, replaced,
#       version,
#       updated, expires (''), pexpireat (''), event count, archive ('1' or ''),
#       lineage, expected lineage ('' skips its check), new event texts...
# Returns as SAVE. The replaced head is trimmed off (LTRIM is O(removed)) after being
# copied, server-side, to the archive list when asked; the new events go in front.
COMPACT = (
    _TOKENS
    + """
local cur = redis.call('HMGET', KEYS[1], 't', 'v', 'x', 'l')
local lineage_ok = ARGV[12] == '' or cur[4] == ARGV[12] .. ':' .. ARGV[2]
{guard}local replaced = tonumber(ARGV[4])
if ARGV[10] == '1' then
  for first = 0, replaced - 1, 1000 do
    local head = redis.call('LRANGE', KEYS[2], first, math.min(first + 999, replaced - 1))
    redis.call('RPUSH', KEYS[3], unpack(head))
  end
end
if replaced >= redis.call('LLEN', KEYS[2]) then
  redis.call('DEL', KEYS[2])
else
  redis.call('LTRIM', KEYS[2], replaced, -1)
end
-- LPUSH puts each value in front of the previous one: push the newest first.
local last = #ARGV
while last >= 13 do
  local first = math.max(last - 999, 13)
  local slice = {}
  for i = last, first, -1 do slice[#slice + 1] = ARGV[i] end
  redis.call('LPUSH', KEYS[2], unpack(slice))
  last = first - 1
end
redis.call('HSET', KEYS[1], 'v', ARGV[5], 'm', ARGV[6], 'n', ARGV[9], 't', ARGV[3],
           'l', ARGV[11] .. ':' .. ARGV[5])
{expire}""".replace("{guard}", _GUARD).replace("{expire}", _EXPIRE)
)

# KEYS: hash, archive. ARGV: now. The archived event texts of a live session, or {}.
ARCHIVED = """
local cur = redis.call('HMGET', KEYS[1], 'id', 'x')
if not cur[1] then return {} end
if cur[2] and tonumber(cur[2]) <= tonumber(ARGV[1]) then return {} end
return redis.call('LRANGE', KEYS[2], 0, -1)
"""

# KEYS: hash, events, archive, tokens [, global index] (standalone only).
# ARGV: now, mode ('any', 'user': only if owned by ARGV[3], 'expired': only if expired).
# Returns {1 deleted live | 0 deleted expired | -1 absent | -2 kept, user, created,
# fork index key (false: no fork)}.
DELETE = """
local cur = redis.call('HMGET', KEYS[1], 'id', 'u', 'c', 'x', 'uk', 'fk')
if not cur[1] then return {-1} end
local live = (not cur[4]) or tonumber(cur[4]) > tonumber(ARGV[1])
if (ARGV[2] == 'user' and cur[2] ~= ARGV[3]) or (ARGV[2] == 'expired' and live) then
  return {-2, cur[2], cur[3]}
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
if KEYS[5] then
  redis.call('ZREM', KEYS[5], cur[1] .. '\\0' .. (cur[2] or ''))
  if cur[5] then redis.call('ZREM', cur[5], cur[1]) end
  if cur[6] then redis.call('ZREM', cur[6], cur[1]) end
end
if live then return {1, cur[2], cur[3], cur[6]} end
return {0, cur[2], cur[3], cur[6]}
"""

# KEYS: one index. ARGV: member, score it must still have, new score ('' = remove).
# Index upkeep in a cluster: a conditional change, so it never undoes a concurrent
# create that re-added the member with another score.
MOVE_INDEX_ENTRY = """
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score or tonumber(score) ~= tonumber(ARGV[2]) then return 0 end
if ARGV[3] == '' then return redis.call('ZREM', KEYS[1], ARGV[1]) end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
return 1
"""

# KEYS: source hash, source events, new hash, new events, new archive, global index,
#       fork index, new tokens (standalone only: the two sessions' keys sit in two slots,
#       which a cluster cannot script together; it forks by copy instead). The owner's user
#       index is the one the source's hash names (``uk``), as DELETE's.
# ARGV: now, token, new id, owner check ('' = none), state ('' with ARGV[12] = '1':
#       the source's), created, expires (''), pexpireat (''), lineage, cut event's
#       stored prefix ('' = all events), cut event id, keep the source's state ('1')
# Returns {1, owner, source version, event count, state} when forked, {-1} when the
# source is absent, {-2} not owned by ARGV[4], {-3} no such event, {-4} the new id is
# live. The events are copied list to list in slices, inside the server.
FORK = """
local now = tonumber(ARGV[1])
local src = redis.call('HMGET', KEYS[1], 'id', 'u', 's', 'v', 'x', 'n', 'uk')
if not src[1] or (src[5] and tonumber(src[5]) <= now) then return {-1} end
if ARGV[4] ~= '' and src[2] ~= ARGV[4] then return {-2} end
local count = tonumber(src[6] or 0)
if ARGV[10] ~= '' then
  -- Every stored event starts with its id ('{"id":<JSON string>,'): a prefix test per
  -- event, no JSON decoding.
  local prefix, found = ARGV[10], nil
  local width = #prefix
  for first = 0, count - 1, 1000 do
    local slice = redis.call('LRANGE', KEYS[2], first, first + 999)
    for i = 1, #slice do
      if string.sub(slice[i], 1, width) == prefix then found = first + i; break end
    end
    if found then break end
  end
  if not found then return {-3} end
  count = found
end
local cur = redis.call('HMGET', KEYS[3], 'id', 'x', 'u', 'uk', 'fk')
if cur[1] then
  if not cur[2] or tonumber(cur[2]) > now then return {-4} end
  redis.call('DEL', KEYS[3], KEYS[4], KEYS[5], KEYS[8])
  redis.call('ZREM', KEYS[6], ARGV[3] .. '\\0' .. (cur[3] or ''))
  if cur[4] then redis.call('ZREM', cur[4], ARGV[3]) end
  if cur[5] then redis.call('ZREM', cur[5], ARGV[3]) end
end
for first = 0, count - 1, 1000 do
  local slice = redis.call('LRANGE', KEYS[2], first, math.min(first + 999, count - 1))
  redis.call('RPUSH', KEYS[4], unpack(slice))
end
local state = ARGV[5]
if ARGV[12] == '1' then state = src[3] end
local fields = {'id', ARGV[3], 's', state, 'v', '1', 'c', ARGV[6], 'm', ARGV[6],
                'n', count, 't', ARGV[2], 'l', ARGV[9] .. ':1',
                'fs', src[1], 'fv', src[4], 'fk', KEYS[7]}
if ARGV[10] ~= '' then fields[#fields + 1] = 'fe'; fields[#fields + 1] = ARGV[11] end
if src[2] then
  fields[#fields + 1] = 'u'; fields[#fields + 1] = src[2]
  fields[#fields + 1] = 'uk'; fields[#fields + 1] = src[7]
end
if ARGV[7] ~= '' then fields[#fields + 1] = 'x'; fields[#fields + 1] = ARGV[7] end
redis.call('HSET', KEYS[3], unpack(fields))
if ARGV[8] ~= '' then
  redis.call('PEXPIREAT', KEYS[3], ARGV[8])
  if count > 0 then redis.call('PEXPIREAT', KEYS[4], ARGV[8]) end
end
redis.call('ZADD', KEYS[6], ARGV[6], ARGV[3] .. '\\0' .. (src[2] or ''))
redis.call('ZADD', KEYS[7], ARGV[6], ARGV[3])
if src[7] then redis.call('ZADD', src[7], ARGV[6], ARGV[3]) end
return {1, src[2] or false, src[4], count, state}
"""

# KEYS: hash, events, archive, tokens. ARGV: now, expected version, token, keep, version,
#       updated, expires (''), pexpireat (''), archive ('1' or ''), lineage, expected
#       lineage ('' skips its check).
# Returns as SAVE. The tail past ``keep`` is copied to the archive list when asked,
# then trimmed off (LTRIM is O(removed)).
REWIND = (
    _TOKENS
    + """
local cur = redis.call('HMGET', KEYS[1], 't', 'v', 'x', 'l', 'n')
local lineage_ok = ARGV[11] == '' or cur[4] == ARGV[11] .. ':' .. ARGV[2]
{guard}local keep = tonumber(ARGV[4])
local stored = cur[5] and tonumber(cur[5]) or redis.call('LLEN', KEYS[2])
if ARGV[9] == '1' then
  for first = keep, stored - 1, 1000 do
    local tail = redis.call('LRANGE', KEYS[2], first, math.min(first + 999, stored - 1))
    redis.call('RPUSH', KEYS[3], unpack(tail))
  end
end
if keep == 0 then
  redis.call('DEL', KEYS[2])
elseif keep < stored then
  redis.call('LTRIM', KEYS[2], 0, keep - 1)
end
redis.call('HSET', KEYS[1], 'v', ARGV[5], 'm', ARGV[6], 'n', keep, 't', ARGV[3],
           'l', ARGV[10] .. ':' .. ARGV[5])
{expire}""".replace("{guard}", _GUARD).replace("{expire}", _EXPIRE)
)
