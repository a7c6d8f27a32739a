#!/usr/bin/env python3
"""Per-block timestamps of the decode step (block_probe TSV): where each kernel's blocks start,
pass their wait, get their input, finish, relative to the previous kernel's last block end."""
import sys, statistics as st
from collections import defaultdict
rows = [l.split('\t') for l in open(sys.argv[1]) if l.strip()]
per = int(sys.argv[2]) if len(sys.argv) > 2 else 6
slots = defaultdict(list); kinds = {}
base = None
for r in rows:
    s, k, b = int(r[0]), int(r[1]), int(r[2])
    t = [int(x) for x in r[3:11]]; sm = int(r[11])
    if base is None: base = t[0]
    t = [((x - base) % (1 << 32)) if x else None for x in t]
    slots[s].append((b, sm, t)); kinds[s] = k
names = {200+1: 'attn', 300: 'merge', 100+2*4+2: 'qkv', 100+2*4: 'out', 100+2*4+3: 'gate|up', 100+6*4: 'down'}
marks = {'attn': ['start', 'wait', 'q', 'st0', 'st1', 'st2', 'st3', 'end'],
         'merge': ['start', 'wait', 'end'],
         'gemv': ['start', 'wait', 'x', 'step0', 'loop', 'end', 'issued']}
def last(t):
    if t[5] is not None and t[6] is not None and t[7] is None: return t[5]  # gemv: end is mark 5
    v = [x for x in t if x is not None]; return v[-1]
agg = defaultdict(lambda: defaultdict(list))
order = []
prev_end = None
for s in sorted(slots):
    name = names.get(kinds[s], str(kinds[s])); ml = marks.get(name, marks['gemv'])
    bl = slots[s]
    end = max(last(t) for _, _, t in bl)
    if prev_end is not None and 2 <= s // per < 30:
        key = (s % per, name)
        if key not in order: order.append(key)
        a = agg[key]
        for i, m in enumerate(ml):
            v = [t[i] - prev_end for _, _, t in bl if t[i] is not None]
            if v:
                a[m + ' min'].append(min(v)); a[m + ' med'].append(st.median(v)); a[m + ' max'].append(max(v))
        a['blocks'].append(len(bl))
    prev_end = end
print('us relative to the previous kernel\'s last block end (median over layers 2..29)')
for key in sorted(order):
    a = agg[key]; name = key[1]; ml = marks.get(name, marks['gemv'])
    print(f'{key[0]} {name:8s} blocks {a["blocks"][0]}')
    for m in ml:
        if m + ' med' in a:
            print(f'    {m:6s} min {st.median(a[m+" min"])/1e3:7.2f}  med {st.median(a[m+" med"])/1e3:7.2f}  max {st.median(a[m+" max"])/1e3:7.2f}')
