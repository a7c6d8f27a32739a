import sys, statistics as st
from collections import defaultdict
rows = [l.split('\t') for l in open(sys.argv[1]) if l.strip()]
per=6; slot_rel = int(sys.argv[2]) if len(sys.argv)>2 else 1
slots = defaultdict(list); kinds={}
base=None
for r in rows:
    s,k,b=int(r[0]),int(r[1]),int(r[2]); t=[int(x) for x in r[3:11]]; sm=int(r[11])
    if base is None: base=t[0]
    t=[((x-base)%(1<<32)) if x else None for x in t]
    slots[s].append((b,sm,t)); kinds[s]=k
def lastv(t): return [x for x in t if x is not None][-1]
bysplit=defaultdict(lambda: defaultdict(list)); bysmcount=defaultdict(lambda: defaultdict(list))
for s in sorted(slots):
    if s%per!=slot_rel or not (2<=s//per<30): continue
    prev_end=max(lastv(t) for _,_,t in slots[s-1])
    smc=defaultdict(int)
    for b,sm,t in slots[s]: smc[sm]+=1
    for b,sm,t in slots[s]:
        key=b//32 if slot_rel==1 else b*10//len(slots[s])
        for i,x in enumerate(t):
            if x is not None:
                bysplit[key][i].append((x-prev_end)/1e3); bysmcount[smc[sm]][i].append((x-prev_end)/1e3)
    # other kernels' blocks on each SM at this time? count per SM
print('by split (or decile of block index): median of marks (us from prev kernel end)')
for k in sorted(bysplit):
    print(f'{k:3d}', ' '.join(f'{st.median(v):6.2f}' for i,v in sorted(bysplit[k].items())), f' n={len(bysplit[k][0])}')
print('by number of this kernel\'s blocks on the SM')
for k in sorted(bysmcount):
    print(f'{k:3d}', ' '.join(f'{st.median(v):6.2f}' for i,v in sorted(bysmcount[k].items())), f' n={len(bysmcount[k][0])}')
