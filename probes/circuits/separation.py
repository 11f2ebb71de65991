"""What separated two census rows of one model and grid point: the part of a row's signature that
the most frequent row lacks, the same layer's part there, and the role on which their measured
profiles (probes.circuits.signature.MechanismSignature.profiles, averaged over each row's seeds)
differ most. A row whose head parts are the reference's, role for role, differs in its edges.
Needs no torch: it reads the signatures stored with each run's circuit."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass


@dataclass(frozen=True)
class Separation:
    """Row `label` told from row `reference` by `part` (absent from the reference), against the
    reference's `counterpart` of the same layer (None where it has none); `role` is the role whose
    mean mass differs most between the two parts, `mass` this row's and `other` the reference's
    (None where a part has no profile: edges alone, or circuit.json from before profiles)."""

    label: str
    reference: str
    part: str | None  # None: the rows share every head part; their edges differ
    counterpart: str | None = None
    role: str | None = None
    mass: float | None = None
    other: float | None = None

    @property
    def distance(self) -> float | None:
        return None if self.mass is None or self.other is None else abs(self.mass - self.other)

    @property
    def text(self) -> str:
        if self.part is None:
            return "the same head parts, joined by other edges"
        if self.counterpart is None:
            return f"{self.part}, which the most frequent row does not have in that layer"
        told = f"{self.part} where the most frequent row has {self.counterpart}"
        if self.distance is None:
            return told + " (no measured profile stored)"
        return (
            f"{told}; their largest difference in any role's mean attention mass is {self.distance:.2f} "
            f"({self.role}: {self.mass:.2f} against {self.other:.2f})"
        )


def part_profiles(members: list, by_layer: bool = False) -> dict:
    """label -> part -> role -> mean mass over the label's seeds (members that carry a signature:
    (run, kind, label, share, signature)); `by_layer`: keyed by each part's layer instead ('L0'), so
    a row counted from seeds whose role words differ has one profile per layer."""
    sums: dict = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for _, _, label, _, *rest in members:
        signature = rest[0] if rest else None
        for part, masses in signature.profiles if signature is not None else ():
            for role, mass in masses:
                sums[label][layer_of(part) if by_layer else part][role].append(mass)
    return {
        label: {part: {role: sum(m) / len(m) for role, m in roles.items()} for part, roles in parts.items()}
        for label, parts in sums.items()
    }


def layer_of(part: str) -> str:
    """'L0' of 'L0 previous-token head', the part's own name otherwise ('MLP0', 'embed')."""
    return part.split(" ", 1)[0]


def separations(labels: list[str], parts: dict, profiles: dict) -> tuple[Separation, ...]:
    """Each row of `labels` after the first (the most frequent) told from the first: `parts`
    label -> its head parts -> heads -> seeds (who_plays), `profiles` part_profiles by layer. Of the
    row's head parts the first lacks, the one whose layer's profile lies furthest from the first
    row's, against the part of that layer the first row's seeds play most (a merged row has several)."""
    if len(labels) < 2:
        return ()
    reference = labels[0]
    out = []
    for label in labels[1:]:
        mine, theirs = set(parts.get(label, {})), set(parts.get(reference, {}))
        extra = sorted(mine - theirs)
        if not extra:
            out.append(Separation(label, reference, None))
            continue
        found = [told(label, reference, part, parts, profiles) for part in extra]
        out.append(max(found, key=lambda s: (s.distance is not None, s.distance or 0.0)))
    return tuple(out)


def told(label: str, reference: str, part: str, parts: dict, profiles: dict) -> Separation:
    """`part` of row `label` against row `reference`'s most played part of its layer."""
    played = {p: sum(map(len, heads.values())) for p, heads in parts.get(reference, {}).items()}
    same_layer = sorted((p for p in played if layer_of(p) == layer_of(part)), key=lambda p: (-played[p], p))
    if not same_layer:
        return Separation(label, reference, part)
    one = profiles.get(label, {}).get(layer_of(part), {})
    other = profiles.get(reference, {}).get(layer_of(part), {})
    roles = sorted(
        compared_roles(one, other), key=lambda r: (-abs(one.get(r, 0.0) - other.get(r, 0.0)), r)
    )  # ties: by name
    if not (one and other and roles):
        return Separation(label, reference, part, same_layer[0])
    role = roles[0]
    return Separation(label, reference, part, same_layer[0], role, one.get(role, 0.0), other.get(role, 0.0))


# ---- rows within tolerance ---------------------------------------------------------------------

TOLERANCE = 0.2  # attention mass: two rows whose head parts' profiles differ by at most this on every
# role (a fifth of a head's attention) are one mechanism, whatever words the role rule gave them


@dataclass(frozen=True)
class Merged:
    """Row `label` counted as row `into`: the same parts and edges but for role words, and no head
    part's profile further than `distance` (<= TOLERANCE) from the other's on any role."""

    label: str
    into: str
    distance: float

    @property
    def text(self) -> str:
        return (
            f"'{self.label}' is counted as '{self.into}': the same circuit but for its role words, and its heads' "
            f"measured profiles are at most {self.distance:.2f} apart on any role (tolerance {TOLERANCE:g})"
        )


def skeleton(signature) -> tuple[str, dict] | None:
    """(the signature's text with each head part named by its layer alone, layer -> head part); None
    where a layer has two head parts (which matches which is then not read from the layer)."""
    layers: dict[str, str] = {}
    for part, _ in signature.heads:
        if layer_of(part) in layers:
            return None
        layers[layer_of(part)] = part
    text = signature.text
    for part in sorted(layers.values(), key=len, reverse=True):  # longest first: no name inside another
        text = text.replace(part, f"{layer_of(part)} head")
    return text, layers


def compared_roles(one: dict, other: dict) -> set:
    """The roles two head parts' profiles are compared on: where the circuit reads the heads. A
    head read at the scored positions (its profile holds attention there: 'attends ...') is compared
    on that attention, over every scored row: what it does at other query rows (the head-detector
    patterns) reaches no scored logit through this circuit, as what a head read through keys and
    values does at the scored position does not (probes.circuits.roles.read_at_scored). A head read
    elsewhere is compared on the detector patterns it was named by. A group's own masses ('(crossed)
    ...') are left out: a group-dependent word is what a near tie in one group flips."""
    roles = {r for r in set(one) | set(other) if not r.startswith("(")}
    scored = {r for r in roles if r.startswith("attends ")}
    return scored or roles


def profile_distance(one: dict, other: dict) -> float:
    """The largest difference in mean mass on any compared role (`compared_roles`; a role one
    profile lacks: 0)."""
    return max((abs(one.get(r, 0.0) - other.get(r, 0.0)) for r in compared_roles(one, other)), default=0.0)


def merged_rows(members: list) -> tuple[list, tuple[Merged, ...]]:
    """`members` ((run, kind, label, share, signature)) with each label that lies within TOLERANCE of a
    more frequent row's relabelled to that row's, and what was merged. Rows are taken most frequent
    first (ties by label), each compared with the rows kept before it, by their seeds' mean profiles."""
    from collections import Counter

    signatures = {m[2]: m[4] for m in members if len(m) > 4 and m[4] is not None}
    counts = Counter(m[2] for m in members)
    profiles = part_profiles(members)
    kept: list[str] = []
    into: dict[str, Merged] = {}
    for label in sorted(signatures, key=lambda lab: (-counts[lab], lab)):
        mine = skeleton(signatures[label])
        for other in kept:
            theirs = skeleton(signatures[other])
            if (
                mine is None
                or theirs is None
                or theirs[0] != mine[0]
                or not (profiles.get(label) and profiles.get(other))
            ):
                continue
            pairs = [
                (profiles[label].get(part, {}), profiles[other].get(theirs[1][layer], {}))
                for layer, part in mine[1].items()
            ]
            distance = max((profile_distance(one, two) for one, two in pairs), default=0.0)
            if distance <= TOLERANCE:
                into[label] = Merged(label, other, distance)
                break
        else:
            kept.append(label)
    relabelled = [(*m[:2], into[m[2]].into, *m[3:]) if m[2] in into else m for m in members]
    return relabelled, tuple(into.values())
