"""The EAGLE proposers: an EAGLE head grown into a draft tree.

``EagleProposer`` (method ``eagle``) is EAGLE-2: an EAGLE-1 head grown into a dynamic tree;
``Eagle3Proposer`` (``eagle3``) grows the same tree from an EAGLE-3 head (three target layers, its own
vocabulary); ``StaticTreeEagleProposer`` (``eagle-static``) grows an EAGLE-1 head into a fixed tree of
top-k-rank paths (EAGLE-1's ``choices``). The dynamic tree:

Knows: the head's own one-layer KV cache (one slot per engine slot), where
entry j holds the pair (token j+1, target feature j) at RoPE position j, and
the features the target produced for accepted tokens (given by the engine
through ``admit`` and ``observe``). Each ``propose``:

1. catch up: feed the new (token, feature) pairs; the last one's logits give
   the root's ``topk`` children, scored by log-probability;
2. expand ``num_steps - 1`` times: run the head on the ``topk`` frontier
   nodes (each sees the committed entries, its ancestors and itself), give
   every node ``topk`` children with cumulative score parent + log p, and
   keep the global best ``topk`` children as the next frontier;
3. rerank: keep the best ``num_draft_tokens - 1`` nodes of all depths, in a
   stable (score, creation) order, so a parent (score >= child's, created
   earlier) is always kept before its children, ties included.

``topk=1`` gives a chain. Parameter names follow SGLang (``num_steps``,
``topk``, ``num_draft_tokens``; the tree's root is counted in
``num_draft_tokens``). Drafts are deterministic, so verification treats q as
a point mass. Tree nodes' head KV is discarded after each propose.

Does not know: verification, or the target's cache.
"""

from __future__ import annotations

import torch
from torch import Tensor

from speculab.models.config import ModelConfig
from speculab.models.draft_vocab import ReducedVocabulary
from speculab.models.eagle_head import EagleHead  # EAGLE-3 heads (eagle3_head.py) share its interface
from speculab.models.llama import ForwardBatch, Transformer, causal_batch
from speculab.speculative.errors import VocabularyMismatchError
from speculab.speculative.proposer import Proposer, ProposeState
from speculab.speculative.tree import Draft


class EagleProposer(Proposer):
    name = "eagle"
    needs_features = True

    def __init__(
        self,
        head: EagleHead,
        target: Transformer,
        *,
        num_steps: int,
        topk: int,
        num_draft_tokens: int,
        kept_token_ids: Tensor | None = None,
    ):
        """``kept_token_ids``: [n] target token ids the head may draft (its draft vocabulary, FR-Spec: the most
        frequent ones); its logits then come from those n rows of the lm_head only. None: the whole vocabulary."""
        if num_steps < 1 or topk < 1 or num_draft_tokens < 2:
            raise ValueError("need num_steps >= 1, topk >= 1 and num_draft_tokens >= 2")
        self.head, self.target = head, target
        self.device = target.norm.weight.device
        self.reduced: ReducedVocabulary | None = None
        self.num_steps, self.topk = num_steps, topk
        most_nodes = topk + (num_steps - 1) * topk * topk
        self.max_draft_tokens = min(num_draft_tokens - 1, most_nodes)
        if kept_token_ids is not None:
            self._reduce_vocabulary(kept_token_ids)

    def _reduce_vocabulary(self, token_ids: Tensor) -> None:
        if getattr(self.head, "d2t", None) is not None:
            raise ValueError("an EAGLE-3 head drafts over its own vocabulary, cut as it loads; kept_token_ids applies to EAGLE-1/2 heads")
        if token_ids.numel() < self.topk:
            raise ValueError(f"the draft vocabulary keeps {token_ids.numel()} tokens, fewer than topk={self.topk}")
        self.reduced = ReducedVocabulary.of(self.target, token_ids)

    def _logits(self, hidden: Tensor) -> Tensor:
        """The head's draft logits [..., vocab or n kept tokens] for its output features [..., hidden]."""
        if self.reduced is None:
            return self.head.logits(self.target, hidden)
        return self.reduced.logits(hidden.to(self.target.dtype))

    def tree_shape(self, most: int | None) -> tuple[int, int, int]:
        """(topk, num_steps, draft nodes kept) per row: the whole tree, or under a draft budget of ``most`` nodes a
        tree narrowed to fit it (no wider or deeper than the nodes kept), so a step whose verify is no longer free
        (a large batch: the ``shared:B`` policy) drafts towards a short chain."""
        if most is None:
            return self.topk, self.num_steps, self.max_draft_tokens
        keep = max(1, min(self.max_draft_tokens, most))
        return min(self.topk, keep), min(self.num_steps, keep), keep

    def _cache_len(self, max_seq_len: int) -> int:
        """The head's cache positions: the sequence, a tree's frontier beyond it and the draft."""
        return max_seq_len + self.topk * max(1, self.num_steps - 1) + self.max_draft_tokens + 2

    def state_bytes(self, num_slots: int, max_seq_len: int) -> int:
        return self.head.cache_bytes(num_slots, self._cache_len(max_seq_len))

    def bind(self, num_slots: int, max_seq_len: int, target: ModelConfig) -> None:
        if self.head.config.vocab_size != target.vocab_size:
            raise VocabularyMismatchError(f"EAGLE head vocab_size {self.head.config.vocab_size} != target vocab_size {target.vocab_size}")
        self.cache = self.head.new_cache(num_slots, self._cache_len(max_seq_len))
        self.features: list[list[Tensor]] = [[] for _ in range(num_slots)]  # target features not yet fed

    # -- slots ------------------------------------------------------------------
    def prefill_chunk(self, slot: int, prompt_ids: list[int], begin: int, end: int, features: Tensor | None = None) -> None:
        """Feed the chunk's (token, feature) pairs: each position's feature with the token after it, up to the prompt's
        last position, whose feature waits for the first output token (``admit``)."""
        last = min(end, len(prompt_ids) - 1)
        if last > begin:
            self._feed([(prompt_ids[begin + 1 : last + 1], features[: last - begin])], [slot])

    def admit(self, slot: int, request, features: Tensor | None = None) -> None:
        """Feed the prompt's (token, feature) pairs that ``prefill_chunk`` did not, alone: all but the last, which pairs
        the last prompt feature with the first output token (sampled after the prefill, so unknown here)."""
        fed, n = self.cache.lengths[slot], len(request.prompt_ids)  # the pairs the chunks fed; none between requests
        if n - 1 > fed:
            self._feed([(request.prompt_ids[fed + 1 :], features[fed : n - 1])], [slot])
        self.features[slot] = [features[n - 1 :]]

    @property
    def prompt_cache_key(self) -> object:
        return ("eagle-head", id(self.head))

    def prompt_state(self, slot: int) -> Tensor:
        return self.cache.export(slot)  # the head's KV of the prompt

    def admit_cached(self, slot: int, request, features: Tensor | None, state: Tensor) -> None:
        self.cache.load(slot, state)
        self.features[slot] = [features[len(request.prompt_ids) - 1 :]]

    def admit_head(self, slot: int, state: Tensor, shared: int) -> int:
        # position t holds the pair (feature t, token t + 1): the head's last position pairs with a token past it
        held = min(shared - 1, state.shape[2])
        if held > 0:
            self.cache.load(slot, state[:, :, :held])
        return max(held, 0)

    def observe(self, slot: int, features: Tensor) -> None:
        self.features[slot].append(features)

    def move(self, src: int, dst: int) -> None:
        self.cache.move(src, dst)
        self.features[dst], self.features[src] = self.features[src], []

    def release(self, slot: int) -> None:
        self.cache.free(slot)
        self.features[slot] = []

    # -- drafting -----------------------------------------------------------------
    def _catch_up(self, reqs, slots) -> tuple[Tensor, Tensor]:
        """Feed each slot's new (token, feature) pairs; returns the last pair's logits [B, V] and hidden [B, H].

        Rows fed together are padded to the longest, and a short row's padding must not run past its cache
        room: a row with more pairs than a verify step can bring (a long catch-up) is fed alone.
        """
        pairs = []
        for slot, r in zip(slots, reqs):
            feats = torch.cat(self.features[slot])
            self.features[slot] = []
            seq = r.prompt_ids + r.output_ids
            m = self.cache.lengths[slot]
            pairs.append((seq[m + 1 : m + 1 + feats.shape[0]], feats))
        steady = [i for i, (toks, _) in enumerate(pairs) if len(toks) <= self.max_draft_tokens + 1]
        groups = [[i] for i in range(len(pairs)) if i not in set(steady)] + ([steady] if steady else [])
        last_hidden: list[Tensor | None] = [None] * len(pairs)
        for group in groups:
            for i, h in zip(group, self._feed([pairs[i] for i in group], [slots[i] for i in group])):
                last_hidden[i] = h
        hidden = torch.stack(last_hidden)  # [B, H]
        # Only the last position's logits are needed: a first catch-up spans the whole prompt.
        return self._logits(hidden).float(), hidden

    def _feed(self, pairs: list[tuple[list[int], Tensor]], slots: list[int]) -> Tensor:
        """Run (tokens, features) pairs into the head's cache; returns each row's last hidden state [rows, H]."""
        width = max(len(toks) for toks, _ in pairs)
        feature_width = pairs[0][1].shape[-1]  # the target's hidden size, or three of them for EAGLE-3
        tokens = torch.zeros(len(pairs), width, dtype=torch.long)
        feats = torch.zeros(len(pairs), width, feature_width, dtype=pairs[0][1].dtype)
        for row, (toks, f) in enumerate(pairs):
            tokens[row, : len(toks)] = torch.tensor(toks)
            feats[row, : len(toks)] = f
        start = torch.tensor([self.cache.lengths[s] for s in slots])
        rows = torch.tensor(slots)
        hidden = self.head.hidden(self.target, tokens.to(self.device), feats.to(self.device), causal_batch(rows, start, width), self.cache)
        for slot, (toks, _) in zip(slots, pairs):
            self.cache.commit(slot, self.cache.lengths[slot] + len(toks))
        last = torch.tensor([len(toks) - 1 for toks, _ in pairs])
        return hidden[torch.arange(len(pairs)), last]

    def propose(self, state: ProposeState) -> list[Draft]:
        reqs = state.requests
        slots = [r.slot for r in reqs]
        bsz = len(reqs)
        k, num_steps, keep = self.tree_shape(state.largest_budget())
        root_logits, root_hidden = self._catch_up(reqs, slots)
        committed = torch.tensor([self.cache.lengths[s] for s in slots])
        logp = root_logits.log_softmax(-1)
        scores, tokens = logp.topk(k, dim=-1)  # [B, k] depth-1 nodes
        tokens = self._to_target(tokens)
        cand_tokens, cand_scores = [tokens], [scores]
        cand_parents = [torch.full((bsz, k), -1, dtype=torch.long)]
        frontier_index = torch.arange(k).expand(bsz, k)  # candidate index of each frontier node
        frontier_features = root_hidden[:, None, :].expand(bsz, k, -1)
        ancestors: list[Tensor] = []  # cache slots of each frontier node's ancestors, one [B, k] per level
        n_cands = k
        for depth in range(1, num_steps):
            slots_now = committed[:, None] + (depth - 1) * k + torch.arange(k)[None, :]  # [B, k]
            mask = self._tree_mask(committed, ancestors, slots_now)
            positions = (committed[:, None] + depth - 1).expand(bsz, k)
            batch = ForwardBatch(torch.tensor(slots), positions, slots_now, mask, slice(slots[0], slots[0] + bsz))
            hidden = self.head.hidden(self.target, tokens.to(self.device), frontier_features.to(self.device), batch, self.cache)
            logits = self._logits(hidden)
            child_logp, child_tokens = logits.float().log_softmax(-1).topk(k, dim=-1)  # [B, k, k]
            child_tokens = self._to_target(child_tokens)
            child_scores = (scores[:, :, None] + child_logp).reshape(bsz, k * k)
            child_tokens = child_tokens.reshape(bsz, k * k)
            child_parents = frontier_index[:, :, None].expand(bsz, k, k).reshape(bsz, k * k)
            cand_tokens.append(child_tokens)
            cand_scores.append(child_scores)
            cand_parents.append(child_parents)
            scores, best = child_scores.topk(k, dim=-1)  # next frontier among the children
            parent_pos = best // k  # which frontier node each came from
            tokens = child_tokens.gather(1, best)
            frontier_index = n_cands + best
            frontier_features = hidden.gather(1, parent_pos[:, :, None].expand(-1, -1, hidden.shape[-1]))
            ancestors = [a.gather(1, parent_pos) for a in ancestors] + [slots_now.gather(1, parent_pos)]
            n_cands += k * k
        # The tree's head KV lies past each slot's committed length: the next catch-up overwrites it.
        return self._rerank(torch.cat(cand_tokens, 1), torch.cat(cand_scores, 1), torch.cat(cand_parents, 1), keep)

    def _to_target(self, ids: Tensor) -> Tensor:
        """Draft vocabulary ids to target ids (``kept_token_ids``; EAGLE-3 maps its own)."""
        return ids if self.reduced is None else self.reduced.to_target(ids)

    def _tree_mask(self, committed: Tensor, ancestors: list[Tensor], slots_now: Tensor) -> Tensor:
        """[B, 1, k, length]: committed entries, the node's ancestors, and itself."""
        bsz, k = slots_now.shape
        length = int(slots_now.max()) + 1
        mask = (torch.arange(length)[None, None, :] < committed[:, None, None]).expand(bsz, k, length).clone()
        rows = torch.arange(bsz)[:, None]
        cols = torch.arange(k)[None, :]
        for level in [*ancestors, slots_now]:
            mask[rows, cols, level] = True
        return mask[:, None].to(self.device)

    def _rerank(self, tokens: Tensor, scores: Tensor, parents: Tensor, keep: int) -> list[Draft]:
        """Keep the best ``keep`` candidates per row, parents before children."""
        drafts = []
        keep = min(keep, tokens.shape[1])
        for row in range(tokens.shape[0]):
            order = torch.sort(-scores[row], stable=True).indices[:keep]
            chosen = order.sort().values  # creation order: parents first
            new_index = torch.full((tokens.shape[1] + 1,), -1, dtype=torch.long)
            new_index[chosen] = torch.arange(keep)
            old_parents = parents[row, chosen]
            new_parents = torch.where(old_parents >= 0, new_index[old_parents.clamp(min=0)], -1)
            if bool((new_parents[old_parents >= 0] < 0).any()):  # an unkept parent: cannot happen with the stable order
                raise AssertionError("EAGLE rerank kept a node without its parent")
            drafts.append(Draft(tokens[row, chosen], new_parents))
        return drafts


class Eagle3Proposer(EagleProposer):
    """EAGLE-3: the same dynamic tree; the head reads three target layers and drafts over its own vocabulary."""

    name = "eagle3"

    def __init__(self, head, target: Transformer, *, num_steps: int, topk: int, num_draft_tokens: int):
        super().__init__(head, target, num_steps=num_steps, topk=topk, num_draft_tokens=num_draft_tokens)
        self.feature_layers = head.feature_layers(target)

    def _to_target(self, ids: Tensor) -> Tensor:
        return self.head.map_tokens(ids.to(self.head.d2t.device)).cpu()


# A static tree as used by EAGLE-1's reference (its `choices`): each path lists top-k ranks from the root.
STATIC_TREES: dict[str, list[list[int]]] = {
    "mc_sim_7b_63": [
        [0],
        [1],
        [2],
        [3],
        [0, 0],
        [0, 1],
        [0, 2],
        [1, 0],
        [1, 1],
        [2, 0],
        [2, 1],
        [3, 0],
        [0, 0, 0],
        [0, 0, 1],
        [0, 0, 2],
        [0, 1, 0],
        [0, 1, 1],
        [0, 2, 0],
        [0, 2, 1],
        [1, 0, 0],
        [0, 0, 0, 0],
        [0, 0, 0, 1],
        [0, 0, 0, 2],
        [0, 0, 0, 0, 0],
        [0, 0, 0, 0, 1],
    ],
}


class StaticTreeEagleProposer(EagleProposer):
    """An EAGLE head grown into a fixed tree (EAGLE-1 style): node [a, b] is the rank-b child of the rank-a root child.

    The same head, caches and verification as the dynamic tree; only the shape is given instead of searched.
    """

    name = "eagle-static"

    def __init__(self, head, target: Transformer, *, tree: str | list[list[int]]):
        paths = STATIC_TREES[tree] if isinstance(tree, str) else tree
        paths = sorted({tuple(p) for p in paths}, key=lambda p: (len(p), p))
        if not paths or any(len(p) == 0 or min(p) < 0 for p in paths):
            raise ValueError("a static tree is a list of non-empty paths of top-k ranks")
        index = {p: i for i, p in enumerate(paths)}
        missing = [p for p in paths if len(p) > 1 and p[:-1] not in index]
        if missing:
            raise ValueError(f"static tree paths {missing[:3]} have no parent path")
        self.paths, self.index = paths, index
        depth = max(map(len, paths))
        super().__init__(head, target, num_steps=depth, topk=max(max(p) for p in paths) + 1, num_draft_tokens=len(paths) + 1)
        self.max_draft_tokens = len(paths)

    def propose(self, state: ProposeState) -> list[Draft]:
        reqs = state.requests
        slots = [r.slot for r in reqs]
        bsz, n = len(reqs), len(self.paths)
        root_logits, root_hidden = self._catch_up(reqs, slots)
        committed = torch.tensor([self.cache.lengths[s] for s in slots])
        tokens = torch.zeros(bsz, n, dtype=torch.long)
        ranked = self._to_target(root_logits.topk(self.topk, dim=-1).indices)  # [B, topk]
        for p, i in self.index.items():
            if len(p) == 1:
                tokens[:, i] = ranked[:, p[0]]
        hidden_of: dict[tuple[int, ...], Tensor] = {}
        slot_of: dict[tuple[int, ...], Tensor] = {}
        offset = 0
        for depth in range(1, self.num_steps):
            parents = [p for p in self.paths if len(p) == depth and any(q[:-1] == p for q in self.paths if len(q) == depth + 1)]
            if not parents:
                break
            slots_now = committed[:, None] + offset + torch.arange(len(parents))[None, :]
            ancestors = [torch.stack([slot_of[p[:j]] for p in parents], 1) for j in range(1, depth)]
            features = torch.stack([root_hidden if depth == 1 else hidden_of[p[:-1]] for p in parents], 1)
            positions = (committed[:, None] + depth - 1).expand(bsz, len(parents))
            batch = ForwardBatch(
                torch.tensor(slots), positions, slots_now, self._tree_mask(committed, ancestors, slots_now), slice(slots[0], slots[0] + bsz)
            )
            node_tokens = tokens[:, [self.index[p] for p in parents]]
            hidden = self.head.hidden(self.target, node_tokens.to(self.device), features.to(self.device), batch, self.cache)
            logits = self._logits(hidden)
            ranked = self._to_target(logits.float().topk(self.topk, dim=-1).indices)  # [B, parents, topk]
            for j, p in enumerate(parents):
                hidden_of[p], slot_of[p] = hidden[:, j], slots_now[:, j]
                for q, i in self.index.items():
                    if len(q) == depth + 1 and q[:-1] == p:
                        tokens[:, i] = ranked[:, j, q[-1]]
            offset += len(parents)
        parent_index = torch.tensor([self.index[p[:-1]] if len(p) > 1 else -1 for p in self.paths])
        return [Draft(tokens[row], parent_index) for row in range(bsz)]
