# Per-phase times of a persistent decode step from its barrier trace (GPUBENCH_DECODE_TRACE on
# branch wip/persistent-decode): python3 phases.py trace.csv[.gz]. For each phase of a layer,
# medians over the layers: the phase (last block's arrival at its closing barrier minus the first
# release from the barrier before), the first block's arrival, the last arrival minus the median
# one (the tail), and the release after the last arrival (the barrier's own latency).
import gzip, sys, collections, statistics as st
opener = gzip.open if sys.argv[1].endswith('.gz') else open
rows=[l for l in opener(sys.argv[1], 'rt') if not l.startswith('#') and not l.startswith('barrier')]
data=collections.defaultdict(dict)
for l in rows:
    b,blk,a,r=map(int,l.strip().split(','))
    data[b][blk]=(a,r)
nb=max(data)+1
names=['A qkv','B attn','C out','D gateup','E down']
phase=collections.defaultdict(list); lat=collections.defaultdict(list); spread=collections.defaultdict(list); first=collections.defaultdict(list)
for k in range(1,nb):
    cur=data[k]
    if not cur or all(v==(0,0) for v in cur.values()): continue
    prev=data[k-1]
    start=min(v[1] for v in prev.values())
    arr=[v[0] for v in cur.values()]
    rel=[v[1] for v in cur.values()]
    name=names[(k-1)%5]
    phase[name].append((max(arr)-start)/1000)
    first[name].append((min(arr)-start)/1000)
    spread[name].append((max(arr)-st.median(arr))/1000)
    lat[name].append((min(rel)-max(arr))/1000)
tot=0
for n in names:
    if phase[n]:
        print(f"{n:10s} phase {st.median(phase[n]):7.2f} us  first-arrival {st.median(first[n]):6.2f}  last-minus-median {st.median(spread[n]):5.2f}  release-after-last {st.median(lat[n]):5.2f}  n={len(phase[n])}")
        tot+=st.median(phase[n])+st.median(lat[n])
print("per layer", round(tot,2))
