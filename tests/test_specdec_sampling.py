"""Speculative *sampling* preserves the target's distribution (temperature > 0), chain (drafts sampled from q,
accepted with min(1, p/q), residual norm(max(0, p-q))) and tree (deterministic top-k candidates, recursive
rejection). Two tests, both with significance 1e-3 and fixed seeds (deterministic):

1. PIT test over every generated token: the randomized probability integral transform of each token under the
   target's exact conditional (tokens ordered by probability) is i.i.d. Uniform(0,1) under the hypothesis;
   chi-square over 20 equal bins, expected count per bin N/20 >= 40 (80 runs x 10 tokens).
2. Exact marginal of the first *speculative* token (the second generated one; the first comes from the
   prefill): P(x2) = sum_x1 p(x1) p(x2|x1), computed with one batched forward over every x1; chi-square over
   cells pooled to expected counts >= 5, dof = cells - 1.

Power: the same tests with the acceptance rule deliberately broken (resample from p instead of the residual;
accept every draft) must reject. They do, by wide margins (see the asserts).

Dynamic draft length (`min_draft_prob`) runs through both tests too; a third checks that a sampled chain's floor is
judged before the draw: test 2 passes the rule as built and rejects the biased one (drop the unlikely draws)."""
import contextlib, math
from dataclasses import replace
import pytest, torch
import eagle_nb.specdec as sd
from eagle_nb.specdec import (SpecConfig, speculative_generate, ModelDrafter, RandomDrafter, TargetDecoder, pit_values,
                              uniformity_chi2, chi2_critical)
from eagle_nb.target import tiny_target

T = 0.8
CHAIN = SpecConfig(num_steps=3, temperature=T, max_new_tokens=10)
TREE = SpecConfig(num_steps=3, topk=2, num_draft_tokens=6, temperature=T, max_new_tokens=10)
# dynamic draft length: a chain that stops where its best draft's cumulative probability falls below the floor
CHAIN_FLOOR = SpecConfig(num_steps=3, temperature=T, max_new_tokens=10, min_draft_prob=0.02)   # about the median best q
TREE_FLOOR = SpecConfig(num_steps=3, topk=2, num_draft_tokens=6, temperature=T, max_new_tokens=10, min_draft_prob=0.008)


@pytest.fixture(autouse=True, scope='module')
def one_thread():
    n = torch.get_num_threads(); torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope='module')
def target():
    t = tiny_target('llama', num_layers=2, seed=3)
    with torch.no_grad(): t.model.lm_head.weight.mul_(8)   # peaky enough that drafts are both accepted and rejected
    return t


def flat_drafter(t):
    return ModelDrafter(t.model, t.vocab_size, logit_scale=0.5)   # the target itself, flattened: q != p, overlapping


def one_decoder(t):
    "One TargetDecoder for every run of a test (as a caller decoding many prompts keeps one): a decoder per call re-packs the"
    " target's weights for oneDNN each time (CPUs without native bf16), a third of these tests' time on a Zen 3."
    return contextlib.closing(TargetDecoder(t))


def pit_stat(t, cfg, runs, seed=0):
    pr = t.tokenizer("The quick brown").input_ids
    g, gu = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed + 1)
    u, tau = [], []
    with one_decoder(t) as dec:
        for _ in range(runs):
            r = speculative_generate(t, flat_drafter(t), pr, cfg, stop_ids=[], generator=g, decoder=dec)
            u += pit_values(t, pr, r.tokens, cfg.temperature, gu)
            tau.append(r.accept_length)
    stat, crit = uniformity_chi2(u)
    assert len(u) / 20 >= 20          # expected count per bin
    return stat, crit, sum(tau) / len(tau)


@pytest.mark.parametrize('cfg', [CHAIN, TREE, CHAIN_FLOOR, TREE_FLOOR], ids=['chain', 'tree', 'chain-floor', 'tree-floor'])
def test_sampling_preserves_distribution_pit(target, cfg):
    stat, crit, tau = pit_stat(target, cfg, 80)
    assert 1.1 < tau, tau           # both acceptances and rejections happen
    assert stat < crit, (stat, crit)


def broken_residual(p, q, token): return p                  # "resample from p" after a rejection


@pytest.mark.slow
@pytest.mark.parametrize('cfg', [CHAIN, TREE], ids=['chain', 'tree'])
def test_pit_test_has_power(target, cfg, monkeypatch):
    monkeypatch.setattr(sd, 'residual', broken_residual)
    stat, crit, _ = pit_stat(target, cfg, 200)
    assert stat > 2 * crit, (stat, crit)
    monkeypatch.undo()
    monkeypatch.setattr(sd, 'accept_probability', lambda p, q, token: 1.0)
    stat, crit, _ = pit_stat(target, cfg, 60)
    assert stat > 3 * crit, (stat, crit)


def exact_second_token_marginal(t, pr, temperature):
    "P(x2) = sum_x1 p(x1 | prompt) p(x2 | prompt, x1), all at `temperature`."
    V = t.vocab_size
    with torch.no_grad():
        p1 = torch.softmax(t.model(torch.tensor([pr])).logits[0, -1].double() / temperature, -1)       # (V,)
        batch = torch.cat([torch.tensor(pr).expand(V, -1), torch.arange(V)[:, None]], 1)             # every x1
        p2 = torch.softmax(t.model(batch).logits[:, -1].double() / temperature, -1)                  # (V, V)
    return p1 @ p2


def pooled_chi2(counts, probs, min_expected=5.0):
    "Chi-square of counts against probs, cells sorted by expected count and pooled until each has >= min_expected."
    n = counts.sum()
    order = probs.argsort(descending=True)
    e, o = (probs[order] * n).tolist(), counts[order].tolist()
    cells, ce, co = [], 0.0, 0.0
    for ei, oi in zip(e, o):
        ce += ei; co += oi
        if ce >= min_expected: cells.append((co, ce)); ce = co = 0.0
    if ce > 0 and cells: cells[-1] = (cells[-1][0] + co, cells[-1][1] + ce)
    stat = sum((a - b) ** 2 / b for a, b in cells)
    return stat, len(cells) - 1


def marginal_stat(t, cfg, runs, seed=0, drafter=flat_drafter):
    pr = t.tokenizer("The quick brown").input_ids
    g = torch.Generator().manual_seed(seed)
    counts = torch.zeros(t.vocab_size, dtype=torch.float64)
    with one_decoder(t) as dec:
        for _ in range(runs):
            r = speculative_generate(t, drafter(t), pr, cfg, stop_ids=[], generator=g, decoder=dec)
            counts[r.tokens[1]] += 1
    stat, dof = pooled_chi2(counts, exact_second_token_marginal(t, pr, cfg.temperature))
    return stat, chi2_critical(dof), dof


@pytest.mark.slow
@pytest.mark.parametrize('cfg', [SpecConfig(num_steps=1, temperature=T, max_new_tokens=2),
                                 SpecConfig(num_steps=1, topk=3, num_draft_tokens=4, temperature=T, max_new_tokens=2)],
                         ids=['chain', 'tree'])
def test_first_speculative_token_exact_marginal(target, cfg, monkeypatch):
    stat, crit, dof = marginal_stat(target, cfg, 1500)
    assert dof >= 10 and stat < crit, (stat, crit, dof)
    monkeypatch.setattr(sd, 'accept_probability', lambda p, q, token: 1.0)   # power: accepting every draft is caught
    stat, crit, dof = marginal_stat(target, cfg, 500)
    assert stat > 2 * crit, (stat, crit, dof)


def test_chi2_critical_values():
    # Wilson-Hilferty vs tabulated chi-square quantiles at 1e-3: dof 19 -> 43.82, dof 50 -> 86.66
    assert abs(chi2_critical(19) - 43.82) < 0.3 and abs(chi2_critical(50) - 86.66) < 0.3


class TopMixDrafter(sd.Drafter):
    "q = w on the target's own top token + (1 - w) spread evenly: with a floor between 1/V and w, one draw in two is 'unlikely'."
    def __init__(self, t, w=0.5): self.t, self.vocab_size, self.w = t, t.vocab_size, w
    def expand(self, nodes):
        with torch.no_grad(): top = self.t.model(torch.tensor([self.node_context(n) for n in nodes])).logits[:, -1].argmax(-1)
        q = torch.full((len(nodes), self.vocab_size), (1 - self.w) / self.vocab_size)
        q[torch.arange(len(nodes)), top] += self.w
        return q.log() * T          # the loop samples softmax(logq / T) = q


def drop_unlikely_draws(floor):
    "The wrong way to shorten a sampled chain: draw every step, then drop the draws whose probability is below the floor."
    real = sd.build_draft_tree
    def build(drafter, root_token, config, generator=None):
        tree = real(drafter, root_token, replace(config, min_draft_prob=0.0), generator)
        k = next((i for i, n in enumerate(tree.nodes) if i and n.score < math.log(floor)), len(tree))   # chain: scores fall with depth
        return sd.DraftTree(tree.nodes[:k], tree.parents[:k])
    return build


@pytest.mark.slow
def test_draft_floor_is_judged_before_the_draw(monkeypatch):
    """min_draft_prob with sampling is judged on q before the draw, and every draw is kept: the first speculative token
    keeps its exact marginal. Dropping the unlikely draws after the draw biases the output toward what the kept draws
    produce (only the average over all draws is p); on a target peaked enough that a draw of its top token is accepted
    far more often than p says, the same test sees that bias."""
    t = tiny_target('llama', num_layers=2, seed=3)
    with torch.no_grad(): t.model.lm_head.weight.mul_(12)
    cfg = SpecConfig(num_steps=1, temperature=T, max_new_tokens=2, min_draft_prob=0.1)
    stat, crit, dof = marginal_stat(t, cfg, 1500, drafter=TopMixDrafter)
    assert dof >= 10 and stat < crit, (stat, crit, dof)
    monkeypatch.setattr(sd, 'build_draft_tree', drop_unlikely_draws(0.1))
    stat, crit, dof = marginal_stat(t, cfg, 1500, drafter=TopMixDrafter)
    assert stat > 1.5 * crit, (stat, crit, dof)
