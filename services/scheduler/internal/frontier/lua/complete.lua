-- Complete. ARGV[A]: number of outcomes; then per outcome 9 fields: host, token, flags,
-- duration ms, crawl-delay ms (-1 = keep the stored one), retry-after ms, the error log
-- line "<kind>\t<status>\t<host>\t<url>\t<error>" ('' = not an error), the server
-- address the request went to ('' = unknown; the stored one stays), kept in host:<host> as
-- addr for the status views, and the CRAWL_PAGES sequence of the page the task stored
-- ('0' = none; "<seq> <pages>" when its message is a bundle of that many pages): a URL
-- that ends fetched with a page is kept in the page log (K_PAGELOG, member
-- "<token>[ <pages>]\n<host>\n<entry>") in this same step, so that Redis keeps the record exactly when it keeps the outcome. flags packs six small fields into one number, because every
-- argument costs the script a string and a table slot: action (1 fetched, 2 retry,
-- 3 failed, 4 disallowed, 5 requeue, 6 park, 7 out of scope, 0 requeue counting an
-- attempt) + 8 × requested (0/1) + 16 × reset error streak (0/1)
-- + 32 × refund the page charge (0/1: no page request was made) + 64 × health (0 says
-- nothing about the host, 1 it did not answer: error, timeout, robots unavailable; 2 it
-- answered; 3 it answered 5xx; 4 its name does not exist) + 512 × first attempt of the URL
-- (0/1).
-- Returns per outcome {result, next time ms, crawl-delay flags, retired} where result is
-- 0 stale, 1 fetched, 2 retry queued, 3 failed, 4 disallowed, 5 requeued, 6 parked (a
-- fetcher found a live policy blocking the URL: it goes to the end of the host's park
-- list with the same attempt; the host's other URLs are parked too when the policy blocks
-- the host, as after any outcome of a blocked host); the flags are
-- 1 (the delay was capped) + 2 (this outcome stored a new Crawl-delay above the cap); and
-- retired is -1, or the number of queued URLs that ended as failed because this outcome
-- retired the host.
--
-- An outcome that made no request arriving after its lease's deadline (a task that reached a
-- fetcher too late, or JetStream's redelivery of a task whose fetcher died) is settled as
-- the reaper would: the lease counts as expired, the URL counts an attempt, so one that
-- kills every fetcher that takes it still ends, and the host waits its full delay, because
-- a request of an earlier delivery may have ended just before the deadline.
--
-- Host retirement: a host is retired when it fails, not when a few of its URLs do.
-- host:<host> field fails counts consecutive failed URLs (health 1 and 3; reset by health 2),
-- each at its first attempt only, so a URL retried back to back counts once; field win
-- holds the host's last 32 answers of URLs at their first attempt, '1' a 5xx and '0'
-- 2xx-4xx, newest last. When fails reaches RETIRE on a failure that did not answer
-- (health 1), or on a 5xx while more than half of win is errors, or at once when the
-- name does not exist (health 4), the host is retired: the outcome's URL and every URL in
-- its back queue end as failed, the back queue is freed, and host:<host> gets
-- retired = now, so that later URLs of the host end as failed on admission (add.lua) or,
-- if they were already waiting in a front queue, when the router reaches them. A URL whose
-- request got no answer (health 1) is retried at the tail of its host queue rather than the
-- head: the failure said nothing about it, and the next request asks the host with
-- another URL, so a host that is down is retired after RETIRE requests, not RETIRE URLs'
-- every attempt.
--
-- For the status page each applied outcome also keeps, in host:<host>, fetched (URLs of
-- the host that ended fetched), rt (last response time, ms) and rtavg (its moving average,
-- weight 1/4 on the newest), mirrored into the bounded zsets busiest (by fetched) and
-- slowest (by rtavg); a retried or failed outcome is logged in errors as
-- "<now ms>\t<retry|failed|retired>\t<its log line>". busiest is set from the host's own
-- count rather than incremented, so a host trimmed from it comes back with its full count,
-- and it is exact: counts only grow. slowest follows each host's own outcomes, so a host
-- whose average fell to the view's floor leaves it, and one left out re-enters on its next
-- outcome above the floor.
local n = tonumber(ARGV[A])
local W = 9
-- retirement applies an outcome's health to the host's failure streak (fails) and answer
-- window (stored win), adding a changed window to the host's fields (set); it returns the
-- streak and whether the host is retired. first: the URL's first attempt. The window holds
-- 32 answers.
local function retirement(health, first, fails, stWin, set)
  local win = stWin or ''
  if first and (health == 2 or health == 3) then
    win = string.sub(win .. (health == 3 and '1' or '0'), -32)
    if win ~= (stWin or '') then
      set[#set + 1] = HF.WIN
      set[#set + 1] = win
    end
  end
  if health == 4 then
    return fails + 1, RETIRE > 0
  elseif (health == 1 or health == 3) and first then
    fails = fails + 1
    if RETIRE == 0 or fails < RETIRE then return fails, false end
    if health == 1 then return fails, true end
    local _, errors = string.gsub(win, '1', '')
    return fails, 2 * errors > #win
  elseif health == 2 then
    return 0, false
  end
  return fails, false
end
local out = {}
-- All leases of the batch in one call. The lease deadlines are only needed for outcomes
-- that made no request (to tell a late one), which are few.
local leaseHosts, askDeadline = {}, {}
for j = 1, n do
  local b = A + 1 + W * (j - 1)
  leaseHosts[j] = slot_of(ARGV[b], ARGV[b + 1])
  if tonumber(ARGV[b + 2]) % 16 < 8 then askDeadline[#askDeadline + 1] = j end
end
local leases, deadlines = {}, {}
for c = 1, n, 1000 do
  local r = redis.call('HMGET', K_LEASE, unpack(leaseHosts, c, math.min(c + 999, n)))
  for j = 1, #r do leases[c + j - 1] = r[j] end
end
for c = 1, #askDeadline, 1000 do
  local hs, js = {}, {}
  for k = c, math.min(c + 999, #askDeadline) do
    local j = askDeadline[k]
    js[#js + 1] = j
    hs[#hs + 1] = leaseHosts[j]
  end
  local d = redis.call('ZMSCORE', K_INFLIGHT, unpack(hs))
  for k = 1, #js do deadlines[js[k]] = tonumber(d[k] or 0) or 0 end
end
local leaseDel, heapArgs, freed = {}, {}, {}
local busyArgs, slowArgs, slowDel, errLines, logArgs = {}, {}, {}, {}, {}
-- A full view only takes hosts above its lowest score, so that in a crawl of many hosts
-- most outcomes skip the zset writes (and the trim) altogether.
local busyFloor, slowFloor = top_floor(K_BUSIEST), top_floor(K_SLOWEST)
-- Leases are deleted in bulk at the end, so a lease consumed earlier in this batch (the same
-- outcome twice) is remembered here.
local consumed = {}
local floor = math.floor
local i = A + 1
for o = 1, n do
  local h, tok, fl = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  local durS = ARGV[i + 3]
  local dur, newcd, ra = tonumber(durS), tonumber(ARGV[i + 4]), tonumber(ARGV[i + 5])
  local errLine, addr, pseq = ARGV[i + 6], ARGV[i + 7], ARGV[i + 8]
  i = i + W
  local act, requested = fl % 8, fl % 16 >= 8
  local reset, refund, health = fl % 32 >= 16, fl % 64 >= 32, floor(fl / 64) % 8
  local v = leases[o]
  local sid = leaseHosts[o]
  local sp = v and string.find(v, ' ', 1, true)
  if not sp or consumed[sid] or string.sub(v, 1, sp - 1) ~= tok then
    -- Stale: a duplicate, or a late outcome after the lease was reaped.
    out[#out + 1] = 0
    out[#out + 1] = 0
    out[#out + 1] = 0
    out[#out + 1] = -1
  else
    leaseDel[#leaseDel + 1] = sid
    consumed[sid] = true
    slot_ended(h, sid)
    local hkey = hk(h)
    local st = redis.call('HMGET', hkey, HF.NEXT, HF.CD, HF.ERR, HF.FAILS, HF.FETCHED, HF.RTAVG, HF.RT, HF.WIN, HF.SLOTS, HF.LIM)
    local stNext = tonumber(st[1] or '0') or 0
    local cd = tonumber(st[2] or '0') or 0
    local stErr = tonumber(st[3] or '0') or 0
    local stFails = tonumber(st[4] or '0') or 0
    local errs, fails = stErr, stFails
    local set = {}
    -- Its limits come with its state.
    local lim = pol_cache[h] or stored_limits(h, st[10])
    local capped = 0
    if newcd >= 0 and newcd ~= cd then
      cd = newcd
      set[#set + 1] = HF.CD
      set[#set + 1] = n2s(cd)
      -- Reported once per host and value: only the outcome that changes the stored value.
      if cd > lim.maxcd then capped = 2 end
    end
    local retire
    fails, retire = retirement(health, fl >= 512, fails, st[8], set)
    -- A retry is an error: the host's error streak grows and sets its backoff.
    local streak = 0
    if act == 2 then
      errs = errs + 1
      streak = errs
    end
    local late = not requested and deadlines[o] <= NOW
    local rtLast = tonumber(st[7] or '0') or 0
    -- With several connections the gap runs from each request's start, set at dispatch
    -- (stNext): the end of one request adds none.
    local multi = lim.conn > 1
    local te, isCapped = next_fetch(NOW, requested and not multi, dur, cd, stNext, late, rtLast, streak, ra, lim)
    if isCapped then capped = capped + 1 end
    local res = act
    local back = 0
    if act == 1 then
      bump('fetched', 1)
      if pseq ~= '0' then
        local sq, np = pseq, ''
        local b = string.find(pseq, ' ', 1, true)
        if b then sq, np = string.sub(pseq, 1, b - 1), string.sub(pseq, b) end
        logArgs[#logArgs + 1] = sq
        logArgs[#logArgs + 1] = tok .. np .. '\n' .. h .. '\n' .. string.sub(v, sp + 1)
      end
    elseif act == 3 then
      bump('failed', 1)
    elseif act == 4 then
      bump('disallowed', 1)
    elseif act == 6 then
      park_entries(h, {string.sub(v, sp + 1)})
    elseif act == 7 then
      -- A live policy narrowed the scope since the URL was queued: it ends, as the
      -- recheck would have ended it.
      bump('out_of_scope', 1)
    elseif act == 0 then
      -- A fetcher on older rules parked the URL or found it out of scope, and the rules in
      -- force admit it: back to its queue counting an attempt (Go sends this only while
      -- one is left), so a fetcher stuck on old rules cannot send it round forever.
      local e = string.sub(v, sp + 1)
      local d, hp, att, u = parse(e)
      if d then e = d .. ' ' .. hp .. ' ' .. n2s(att + 1) .. ' ' .. u end
      redis.call('LPUSH', bq(h), e)
      bump('queued', 1)
      back = 1
      res = 5
    else
      -- The entry is only needed when the URL goes back to its queue.
      local e = string.sub(v, sp + 1)
      if act == 5 and late then
        -- Counted as an expired lease, as the reaper would have, and logged alike.
        bump('expired', 1)
        local d, hp, att, u = parse(e)
        local why = 'no outcome before the lease deadline'
        local le = lease_error(sid, tok)
        if le then why = why .. '; last error: ' .. le end
        if d and att + 1 <= MAXR then
          redis.call('LPUSH', bq(h), d .. ' ' .. hp .. ' ' .. n2s(att + 1) .. ' ' .. u)
          bump('queued', 1)
          back = 1
          res = 2
        else
          res = 3
          bump('failed', 1)
          why = exhausted(att or 0, why)
        end
        errLine = 'lease-expired\t0\t' .. h .. '\t' .. string.sub(string.match(u or '', '^[^ ]*'), 1, 512) .. '\t' .. why
      elseif act == 5 then
        redis.call('LPUSH', bq(h), e)
        bump('queued', 1)
        back = 1
      else
        local d, hp, att, u = parse(e)
        if not d or att + 1 > MAXR or retire then
          res = 3
          bump('failed', 1)
          if d and not retire and att + 1 > MAXR then
            -- The error field is the line's fifth; it gets the reason in front.
            local head, text = string.match(errLine, '^([^\t]*\t[^\t]*\t[^\t]*\t[^\t]*\t)(.*)$')
            if head then errLine = head .. exhausted(att, text) end
          end
        else
          local q = d .. ' ' .. hp .. ' ' .. n2s(att + 1) .. ' ' .. u
          if health == 1 then
            redis.call('RPUSH', bq(h), q)
          else
            redis.call('LPUSH', bq(h), q)
          end
          bump('queued', 1)
          back = 1
        end
      end
    end
    if refund then
      bump('pages', -1)
      if charge_host(h) then redis.call('HINCRBY', hkey, HF.PAGES, -1) end
    end
    if reset then errs = 0 end
    local teS = n2s(te)
    set[#set + 1] = HF.NEXT
    set[#set + 1] = teS
    if addr ~= '' then
      set[#set + 1] = HF.ADDR
      set[#set + 1] = addr
    end
    if requested then
      local old = tonumber(st[6] or '')
      local avg = dur
      if old then avg = floor(old + (dur - old) / 4 + 0.5) end
      -- The duration arrives as a decimal integer, so it is stored as it came.
      set[#set + 1] = HF.RT
      set[#set + 1] = durS
      set[#set + 1] = HF.RTAVG
      set[#set + 1] = n2s(avg)
      if not slowFloor or avg > slowFloor then
        slowArgs[#slowArgs + 1] = avg
        slowArgs[#slowArgs + 1] = h
      elseif old and old > slowFloor then
        -- It may be in the view with its old, higher average: it drops out instead.
        slowDel[#slowDel + 1] = h
      end
    end
    if act == 1 then
      local nf = (tonumber(st[5] or '0') or 0) + 1
      set[#set + 1] = HF.FETCHED
      set[#set + 1] = nf
      -- Counts only grow, so a host left out of a full view is below every member.
      if not busyFloor or nf > busyFloor then
        busyArgs[#busyArgs + 1] = nf
        busyArgs[#busyArgs + 1] = h
      end
    end
    -- Streaks are written only when they change: most outcomes are successes of hosts
    -- without a streak, and an absent field reads as 0.
    if errs ~= stErr then
      set[#set + 1] = HF.ERR
      set[#set + 1] = n2s(errs)
    end
    if fails ~= stFails then
      set[#set + 1] = HF.FAILS
      set[#set + 1] = n2s(fails)
    end
    if res == 3 then keep_recrawl(string.sub(v, sp + 1), requested and 1 or 0) end
    local retired = -1
    if retire then
      if K_OUTBOX then
        for _, q in ipairs(redis.call('LRANGE', bq(h), 0, -1)) do keep_recrawl(q, 0) end
      end
      -- The queue's URLs end failed with their host, listed on the skip log.
      retired = spool_queue(h, nil, ' retired')
      if retired > 0 then
        bump('queued', -retired)
        bump('failed', retired)
      end
      bump('retired', 1)
      set[#set + 1] = HF.RETIRED
      set[#set + 1] = n2s(NOW)
    end
    redis.call('HSET', hkey, unpack(set))
    if errLine ~= '' and (res == 2 or res == 3) then
      local r = 'retry'
      if retire then r = 'retired' elseif res == 3 then r = 'failed' end
      errLines[#errLines + 1] = n2s(NOW) .. '\t' .. r .. '\t' .. errLine
    end
    -- Another task of the host still out (several connections) keeps it active.
    local others = slots_busy(h, lim, consumed, st[9])
    if retire and others > 0 then
      -- Its queue is gone; the task still out keeps it active, out of the heap (where
      -- several connections may have left it), until its outcome frees it.
      redis.call('ZREM', K_HEAP, h)
    elseif not retire and lim.block then
      park_queue(h)
      redis.call('ZREM', K_HEAP, h)
      if others == 0 then
        freed[#freed + 1] = h
        expire_state(h, te)
      end
    elseif not retire and (back == 1 or redis.call('EXISTS', bq(h)) == 1) then
      requeue_host(h, te, lim, others, heapArgs)
    elseif others == 0 then
      freed[#freed + 1] = h
      expire_state(h, te)
    end
    out[#out + 1] = res
    out[#out + 1] = te
    out[#out + 1] = capped
    out[#out + 1] = retired
  end
end
bulk('HDEL', K_LEASE, leaseDel)
bulk('HDEL', K_LASTERR, leaseDel)
bulk('ZREM', K_INFLIGHT, leaseDel)
bulk('ZADD', K_HEAP, heapArgs)
bulk('ZADD', K_PAGELOG, logArgs)
if #busyArgs > 0 then
  bulk('ZADD', K_BUSIEST, busyArgs)
  trim_top(K_BUSIEST)
end
if #slowDel > 0 then bulk('ZREM', K_SLOWEST, slowDel) end
if #slowArgs > 0 then
  bulk('ZADD', K_SLOWEST, slowArgs)
  trim_top(K_SLOWEST)
end
log_errors(errLines)
free_and_route(freed)
flush_stats()
return out
