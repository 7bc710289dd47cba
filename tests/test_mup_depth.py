"""μP's depth recipes (optim.mup.depth: depth_mup, completep) against EleutherAI/nanoGPT-mup's CompleteP recipe
(model.py at commit 3904404: residual branches × m_L^-α, its configure_optimizers groups, AdamW).

The reference numbers below are what ``scripts/record_nanogpt_mup.py`` prints, running that model.py from a
checkout outside this repository (its code is not here):
n_embd 16 over a base width of 8 (8 heads: d_head 2 over 1, where its 1/d_head attention and ours, √d₀/d_head,
agree), 4 blocks over a base depth of 2, vocabulary 11, context 8, bias=False, float64, AdamW at LR 2^-5 and ε
10^-3 with each group's LR the base LR × its lr_scale, its tied wte/lm_head untied (lm_head in the embedding
group, where the tied matrix is). Each parameter starts from ``draw(k, shape, std)`` below, at the reference's
own init std, k its place in the list; the batch is drawn from seeds 7 and 8. Per parameter: its group's LR, its
decay per unit of weight decay (LR × the group's weight_decay / weight_decay), its ε, then one step's change
Δ = before − after at weight decay 0: Σ Δ² and the first six entries; then those six at weight decay 0.1.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from omegaconf import OmegaConf

from modula_cli.models.variant import Variant
from modula_cli.nn import LayerNorm, Mul, layer_names
from modula_cli.optim import OptimConfig, build_network, init_state, optimizer_step
from modula_cli.optim.modes.mup import rules_of
from modula_cli.optim.modes.mup_rules import init_rms
from helpers import optim_config

COMPLETEP = {  # α = 1: branch 0.5, loss 2.390949630855878
    "wte.weight": (0.03125, 0.03125, 0.0005, 0.1460242815,
        [-0.02799330242, -0.02965202652, 0.0232434091, 0.02902875483, 0.02960379168, -0.02421562867],
        [-0.0280692678, -0.02959407328, 0.02327451158, 0.02896109234, 0.02968315088, -0.0242244303]),
    "wpe.weight": (0.03125, 0.03125, 0.0005, 0.1070650646,
        [0.03085407104, -0.03071319209, 0.03016928753, -0.03082147587, -0.03025923666, -0.03040407141],
        [0.03081676264, -0.03069326121, 0.03022957913, -0.03081245526, -0.03024819166, -0.03030878324]),
    "h.0.attn.c_attn.weight": (0.015625, 0.03125, 0.00025, 0.02888738403,
        [-4.504253129e-05, -3.446064275e-05, 0.0001002855915, -5.470531982e-05, 4.900100564e-05, -1.060924537e-09],
        [-3.482801527e-05, 6.957610258e-06, 6.958500619e-05, -9.717737547e-05, 0.0001482120966, 3.487363324e-05]),
    "h.0.attn.c_proj.weight": (0.015625, 0.03125, 0.00025, 0.02979542461,
        [0.002359634947, 0.008780151272, 0.01160693082, -0.01371868525, -0.01342068611, -0.007563406444],
        [0.002358168676, 0.008703314207, 0.01165217424, -0.01371444818, -0.01349078972, -0.007471404803]),
    "h.0.mlp.c_fc.weight": (0.015625, 0.03125, 0.00025, 0.09455009386,
        [0.01036919062, -0.001893987284, 0.007699181527, -0.002249656533, -0.006869436896, 0.006918230029],
        [0.01029598399, -0.001907100867, 0.00764399772, -0.002224097314, -0.006886555341, 0.006852744054]),
    "h.0.mlp.c_proj.weight": (0.015625, 0.03125, 0.00025, 0.09308763731,
        [-0.009640525766, 0.0141600493, -0.01009407082, 0.01318489118, 0.0065203787, -0.01312944479],
        [-0.009634147205, 0.01416169562, -0.01012346926, 0.01315039507, 0.006470332413, -0.01309109484]),
    "h.1.attn.c_attn.weight": (0.015625, 0.03125, 0.00025, 0.02925592467,
        [-3.39222963e-05, -7.082012938e-05, -4.394633833e-05, 5.612239092e-06, 8.179364451e-05, -2.889100626e-05],
        [3.479275344e-05, -1.602670618e-05, -0.0001281274689, -4.098225737e-06, 0.0001489511778, -2.525018337e-05]),
    "h.1.attn.c_proj.weight": (0.015625, 0.03125, 0.00025, 0.02921045189,
        [0.01309761131, -0.003160891965, -0.01295995465, -0.01208459069, -0.0143430446, -0.01186180916],
        [0.01310916502, -0.003229072637, -0.01299388705, -0.01210965203, -0.01433794304, -0.01184376994]),
    "h.1.mlp.c_fc.weight": (0.015625, 0.03125, 0.00025, 0.09518755276,
        [-0.008404708004, 0.01177898193, 0.008353788882, 0.00899490884, 0.008009139526, -0.0104501952],
        [-0.008384267078, 0.01176700359, 0.008368740513, 0.009043840896, 0.00799476717, -0.01051240161]),
    "h.1.mlp.c_proj.weight": (0.015625, 0.03125, 0.00025, 0.09589228869,
        [-0.01127324188, -0.003978272024, -0.01145360437, 0.009063707782, -0.01399502947, 0.01037679302],
        [-0.01128650696, -0.003983150075, -0.0114740928, 0.009069826803, -0.014037241, 0.01030069165]),
    "h.2.attn.c_attn.weight": (0.015625, 0.03125, 0.00025, 0.02725486447,
        [6.259965532e-05, -0.0001233497446, 6.248316143e-05, 2.422813618e-05, 5.000661213e-05, -2.155623095e-05],
        [1.5325095e-05, -0.0001472430732, 0.0001351938025, -8.883167055e-05, 5.430528609e-05, -2.024845052e-05]),
    "h.2.attn.c_proj.weight": (0.015625, 0.03125, 0.00025, 0.02506235508,
        [-0.00680513409, -0.0139170181, -0.01090095204, 0.008736243016, 0.01354527335, -0.0131953639],
        [-0.006875712353, -0.01396468142, -0.01089740867, 0.008729642194, 0.01357771348, -0.01314128282]),
    "h.2.mlp.c_fc.weight": (0.015625, 0.03125, 0.00025, 0.09675151256,
        [-0.007330551139, -0.01018527716, 0.01403463846, -0.009472218942, 0.01364206198, 0.01233313176],
        [-0.007393372296, -0.0101447595, 0.0140809854, -0.009423915821, 0.01361657165, 0.01234306542]),
    "h.2.mlp.c_proj.weight": (0.015625, 0.03125, 0.00025, 0.09521551804,
        [0.007583451565, -0.01368526874, -0.002217734724, -0.01029696456, 0.01349434623, 0.01136025129],
        [0.007531935307, -0.01380642516, -0.002280718309, -0.01030381441, 0.01354530905, 0.01129335453]),
    "h.3.attn.c_attn.weight": (0.015625, 0.03125, 0.00025, 0.0298989732,
        [-4.948398427e-05, 1.101342849e-05, 5.719172892e-05, 1.951225488e-05, 6.496986365e-05, -1.018128248e-05],
        [-4.105950481e-05, 2.639602948e-05, 1.133547216e-05, 4.469472894e-05, 5.433365853e-05, 4.870545249e-05]),
    "h.3.attn.c_proj.weight": (0.015625, 0.03125, 0.00025, 0.02998163089,
        [0.005391905866, 0.01348926965, -0.01190683483, 0.01359680071, -0.01272888568, 0.007930178167],
        [0.005402975735, 0.01345338279, -0.01179823867, 0.0135304402, -0.01267717038, 0.007911677776]),
    "h.3.mlp.c_fc.weight": (0.015625, 0.03125, 0.00025, 0.09236029362,
        [-0.009822675763, 0.007037250446, -0.01111083623, 0.01192815261, -0.009759054842, -0.002918485656],
        [-0.009818459297, 0.00702620156, -0.01109436335, 0.01193680736, -0.009779363885, -0.002989486252]),
    "h.3.mlp.c_proj.weight": (0.015625, 0.03125, 0.00025, 0.09923210832,
        [-0.009397219044, 0.01205457958, 0.01252270897, -0.01415587773, -0.01111260329, -0.01167690687],
        [-0.009438207756, 0.01205754787, 0.01249459799, -0.01418389147, -0.01107648531, -0.01174730151]),
    "lm_head.weight": (0.03125, 0.03125, 0.0005, 0.1525635897,
        [-0.02889095133, -0.03011865328, -0.03061122206, 0.03040325533, 0.02995087182, 0.02925036843],
        [-0.02889329931, -0.03009197374, -0.03061868807, 0.03033591678, 0.02994429932, 0.02924544251]),
}
DEPTH_MUP = {  # α = 0.5: branch 0.7071067811865475, loss 2.3911282726048144
    "wte.weight": (0.03125, 0.03125, 0.0005, 0.1458944079,
        [-0.02753977281, -0.02970257046, 0.01612034991, 0.02929359087, 0.02956680407, -0.02352772028],
        [-0.02761573819, -0.02964461721, 0.01615145239, 0.02922592838, 0.02964616326, -0.02353652191]),
    "wpe.weight": (0.03125, 0.03125, 0.0005, 0.106712056,
        [0.03085952935, -0.03073797215, 0.03023126991, -0.0308102643, -0.030280598, -0.03040699632],
        [0.03082222095, -0.03071804127, 0.03029156152, -0.03080124369, -0.030269553, -0.03031170815]),
    "h.0.attn.c_attn.weight": (0.011048543456039806, 0.02209708691207961, 0.0003535533905932738, 0.014483183,
        [-3.211066575e-05, -2.520816875e-05, 6.996984363e-05, -3.488673269e-05, 3.407165366e-05, -2.39378332e-06],
        [-2.488791221e-05, 4.078958811e-06, 4.826125158e-05, -6.491901125e-05, 0.0001042244888, 2.226634941e-05]),
    "h.0.attn.c_proj.weight": (0.011048543456039806, 0.02209708691207961, 0.0003535533905932738, 0.01508703227,
        [0.0001024083132, 0.006162184281, 0.00832157445, -0.00970917611, -0.009345605518, -0.007062214037],
        [0.000101371503, 0.006107852272, 0.008353566378, -0.009706180049, -0.009395176253, -0.006997159053]),
    "h.0.mlp.c_fc.weight": (0.011048543456039806, 0.02209708691207961, 0.0003535533905932738, 0.04669266949,
        [0.007409417325, 0.001220417414, 0.004447126145, -0.001496702893, -0.006139559174, 0.003765392462],
        [0.007357652418, 0.001211144711, 0.004408105301, -0.001478629796, -0.006151663742, 0.003719086885]),
    "h.0.mlp.c_proj.weight": (0.011048543456039806, 0.02209708691207961, 0.0003535533905932738, 0.04618904479,
        [-0.006840601076, 0.01000416807, -0.00677428235, 0.009295179442, 0.004973406386, -0.009195824547],
        [-0.006836090752, 0.0100053322, -0.006795070186, 0.009270787007, 0.004938018317, -0.009168707044]),
    "h.1.attn.c_attn.weight": (0.011048543456039806, 0.02209708691207961, 0.0003535533905932738, 0.01447951309,
        [-2.746898905e-05, -4.934478275e-05, -2.083167725e-05, 7.980120314e-06, 5.859286194e-05, -1.601753384e-05],
        [2.111988859e-05, -1.059998164e-05, -8.035672556e-05, 1.113784785e-06, 0.0001060804091, -1.344308328e-05]),
    "h.1.attn.c_proj.weight": (0.011048543456039806, 0.02209708691207961, 0.0003535533905932738, 0.01449656961,
        [0.009115983752, -0.004178047647, -0.00913924375, -0.008457047593, -0.01009101784, -0.008197700599],
        [0.009124153457, -0.004226258663, -0.009163237579, -0.008474768634, -0.0100874105, -0.008184944943]),
    "h.1.mlp.c_fc.weight": (0.011048543456039806, 0.02209708691207961, 0.0003535533905932738, 0.04754614678,
        [-0.006180661943, 0.008405994146, 0.005873870397, 0.006451914657, 0.005392114719, -0.007431788563],
        [-0.006166208025, 0.008397524175, 0.005884442797, 0.006486514846, 0.005381951929, -0.007475775135]),
    "h.1.mlp.c_proj.weight": (0.011048543456039806, 0.02209708691207961, 0.0003535533905932738, 0.04768894978,
        [-0.00781416182, -0.003527579792, -0.007943519028, 0.006577061407, -0.009885395849, 0.007217457343],
        [-0.007823541652, -0.003531029095, -0.007958006542, 0.006581388209, -0.009915243912, 0.007163645543]),
    "h.2.attn.c_attn.weight": (0.011048543456039806, 0.02209708691207961, 0.0003535533905932738, 0.01349159738,
        [4.451857961e-05, -8.339795429e-05, 5.041610649e-05, 1.224020839e-05, 3.692831974e-05, -1.110225724e-05],
        [1.109041743e-05, -0.0001002930889, 0.0001018302938, -6.770514764e-05, 3.996794125e-05, -1.017751683e-05]),
    "h.2.attn.c_proj.weight": (0.011048543456039806, 0.02209708691207961, 0.0003535533905932738, 0.01255720141,
        [-0.005338061931, -0.009775350317, -0.007753766319, 0.006028165357, 0.009547160972, -0.009254196905],
        [-0.005387968299, -0.009809053377, -0.007751260774, 0.006023497871, 0.009570099605, -0.009215955811]),
    "h.2.mlp.c_fc.weight": (0.011048543456039806, 0.02209708691207961, 0.0003535533905932738, 0.04824732783,
        [-0.003678653799, -0.0066953091, 0.009932737476, -0.007256961256, 0.009616495149, 0.008757497972],
        [-0.003723075066, -0.006666658788, 0.009965509713, -0.007222805791, 0.009598470763, 0.008764522126]),
    "h.2.mlp.c_proj.weight": (0.011048543456039806, 0.02209708691207961, 0.0003535533905932738, 0.04750033213,
        [0.005261160038, -0.009653166669, -0.001373614917, -0.007267645675, 0.00957034233, 0.008022421153],
        [0.005224732542, -0.009738837197, -0.001418151037, -0.007272489247, 0.009606378489, 0.007975117995]),
    "h.3.attn.c_attn.weight": (0.011048543456039806, 0.02209708691207961, 0.0003535533905932738, 0.0149499844,
        [-3.507549945e-05, 9.582557521e-06, 3.483062303e-05, 1.191575135e-05, 4.127897327e-05, -7.619571223e-06],
        [-2.911849289e-05, 2.045969899e-05, 2.405352917e-06, 2.972244952e-05, 3.37580405e-05, 3.40196384e-05]),
    "h.3.attn.c_proj.weight": (0.011048543456039806, 0.02209708691207961, 0.0003535533905932738, 0.01483910562,
        [0.004929893007, 0.00941710983, -0.0084251613, 0.009519470803, -0.008995259729, 0.006181059703],
        [0.004937720586, 0.009391733986, -0.00834837222, 0.009472546837, -0.008958691486, 0.006167977951]),
    "h.3.mlp.c_fc.weight": (0.011048543456039806, 0.02209708691207961, 0.0003535533905932738, 0.04596868885,
        [-0.007008619723, 0.004353704964, -0.007920572983, 0.008552429829, -0.006820102614, -0.00273679796],
        [-0.007005638232, 0.004345892222, -0.007908924892, 0.008558549661, -0.006834463276, -0.002787002963]),
    "h.3.mlp.c_proj.weight": (0.011048543456039806, 0.02209708691207961, 0.0003535533905932738, 0.04931760227,
        [-0.006186591584, 0.008468912407, 0.008728255564, -0.01005535383, -0.007233273705, -0.008496750897],
        [-0.006215574981, 0.008471011311, 0.008708378101, -0.01007516254, -0.007207734434, -0.008546527425]),
    "lm_head.weight": (0.03125, 0.03125, 0.0005, 0.1519468376,
        [-0.029277094, -0.0301940197, -0.03062705728, 0.03045074178, 0.03007376355, 0.02915207674],
        [-0.02927944198, -0.03016734016, -0.03063452329, 0.03038340323, 0.03006719105, 0.02914715081]),
}

BRANCH = {"completep": 0.5, "depth_mup": 2**-0.5}  # the reference's residual_scaling at depth 4 over 2
REFERENCE = {"completep": COMPLETEP, "depth_mup": DEPTH_MUP}
VOCAB, CONTEXT, WIDTH, HEADS, DEPTH, LR, EPS = 11, 8, 16, 8, 4, 2.0**-5, 1e-3
DATA = OmegaConf.create({"name": "shakespeare", "kind": "language", "vocab_size": VOCAB, "context": CONTEXT})


def draw(k: int, shape: tuple[int, ...], std: float) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(1000 + k), dtype=torch.float64) * std


def reference_weights() -> dict[str, torch.Tensor]:
    """The reference's parameters by its names, in its order, drawn as its run drew them."""
    names = ["wte.weight", "wpe.weight"]
    for i in range(DEPTH):
        names += [f"h.{i}.attn.c_attn.weight", f"h.{i}.attn.c_proj.weight", f"h.{i}.mlp.c_fc.weight",
                  f"h.{i}.mlp.c_proj.weight"]
    names.append("lm_head.weight")
    shapes = {"wte": (VOCAB, WIDTH), "wpe": (CONTEXT, WIDTH), "c_attn": (3 * WIDTH, WIDTH),
              "attn.c_proj": (WIDTH, WIDTH),
              "c_fc": (4 * WIDTH, WIDTH), "mlp.c_proj": (WIDTH, 4 * WIDTH), "lm_head": (VOCAB, WIDTH)}
    out = {}
    for k, name in enumerate(names):
        shape = next(s for key, s in shapes.items() if key in name)
        std = 0.02 if name.startswith(("wte", "wpe", "lm_head")) else 0.02 / math.sqrt(WIDTH / 8)
        out[name] = draw(k, shape, std)
    return out


def source_of(layer: str) -> tuple[str, slice]:
    """Our layer ``attn.q[2]`` → the reference's parameter and the rows of it that are ours."""
    role, _, block = layer.rstrip("]").partition("[")
    rows = slice(None)
    if role in ("attn.q", "attn.k", "attn.v"):
        third = "qkv".index(role[-1])
        rows = slice(third * WIDTH, (third + 1) * WIDTH)
    name = {"embed.token": "wte.weight", "embed.position": "wpe.weight", "output": "lm_head.weight",
            "attn.q": "attn.c_attn.weight", "attn.k": "attn.c_attn.weight", "attn.v": "attn.c_attn.weight",
            "attn.out": "attn.c_proj.weight", "mlp.in": "mlp.c_fc.weight", "mlp.out": "mlp.c_proj.weight"}[role]
    return (f"h.{block}.{name}" if block else name), rows


def ours(recipe: str, depth: int = DEPTH, **optim):
    arch = OmegaConf.create({"name": "standard_gpt", "width": WIDTH, "depth": depth, "heads": HEADS,
                             "residual_scale": 1.0})
    cfg = optim_config(mode="mup", mup_base_width=8, mup_depth=recipe, mup_base_depth=2, eps=EPS, lr=LR,
                      schedule="constant", **optim)
    net = build_network(arch, DATA, Variant(), cfg)
    for module in net.walk():
        if isinstance(module, LayerNorm):
            module.eps = 1e-5  # the reference's LayerNorm ε (ours: 1e-12); an architecture detail, not the recipe
    return net, cfg


@pytest.mark.parametrize("recipe", ["completep", "depth_mup"])
def test_one_step_of_every_parameter_equals_nanogpt_mup(recipe):
    """Branch multipliers, each parameter's group LR, decay and ε, the loss, and one step's change of every
    parameter from the same weights and batch: equal to the reference's (rtol 1e-4)."""
    table = REFERENCE[recipe]
    net, cfg = ours(recipe)
    branches = [m.scalar for m in net.walk() if isinstance(m, Mul)]
    assert len(branches) == 2 * DEPTH and branches == pytest.approx([BRANCH[recipe]] * 2 * DEPTH, rel=1e-12)
    theirs = reference_weights()
    names = layer_names(net)
    sources = [source_of(name) for name in names]
    weights = [theirs[name][rows].clone().requires_grad_() for name, rows in sources]
    for layer, (name, _), rule in zip(names, sources, rules_of(net), strict=True):
        lr, decay, eps, _, _, _ = table[name]
        assert (LR * rule.lr, LR * rule.decay, EPS * rule.eps) == pytest.approx((lr, decay, eps), rel=1e-12), layer
    idx = torch.randint(0, VOCAB, (4, CONTEXT), generator=torch.Generator().manual_seed(7))
    targets = torch.randint(0, VOCAB, (4, CONTEXT), generator=torch.Generator().manual_seed(8))
    loss = torch.nn.functional.cross_entropy(net(idx, weights).flatten(0, 1), targets.flatten())
    loss_line = {"completep": 2.390949630855878, "depth_mup": 2.3911282726048144}[recipe]  # theirs, as above
    assert loss.item() == pytest.approx(loss_line, rel=1e-9)
    grads = list(torch.autograd.grad(loss, weights))
    weights = [w.detach() for w in weights]
    plain, decayed = one_step(net, cfg, sources, weights, grads), one_step(net, cfg, sources, weights, grads, wd=0.1)
    for name, delta in plain.items():
        _, decay, _, squares, head, head_decayed = table[name]
        assert delta.pow(2).sum().item() == pytest.approx(squares, rel=1e-4), name
        assert delta.flatten()[:6].tolist() == pytest.approx(head, rel=1e-4, abs=1e-12), name
        # AdamW decays before the step (w·(1 − s) − Δ), we after it ((w − Δ)·(1 − s)): ours is theirs − s·Δ
        s = 0.1 * decay
        expected = [theirs - s * ours for theirs, ours in zip(head_decayed, head)]
        assert decayed[name].flatten()[:6].tolist() == pytest.approx(expected, rel=1e-4, abs=1e-12), name


def one_step(net, cfg: OptimConfig, sources, weights, grads, wd: float = 0.0) -> dict[str, torch.Tensor]:
    """One step from ``weights`` (left as they are): each reference parameter's change, ours reassembled."""
    cfg = dataclasses.replace(cfg, wd=wd)
    after = [w.clone() for w in weights]
    optimizer_step(net, after, grads, init_state(after, cfg), cfg, t=0, total_steps=10)
    deltas: dict[str, list] = {}
    for (name, rows), w0, w in zip(sources, weights, after):
        deltas.setdefault(name, []).append((rows, w0 - w))
    return {name: torch.cat([piece for _, piece in sorted(pieces, key=lambda p: p[0].start or 0)])
            for name, pieces in deltas.items()}


def test_the_reference_groups_by_hand():
    """The table's own numbers are the recipe's: m_w = 2, m_L = 2; CompleteP's hidden LR η/m_w · m_L^0, decay
    η·wd (wd·m_w at LR η/m_w), ε 10^-3/(m_w·m_L); Depth-μP's η/m_w · m_L^-½ and ε 10^-3/(m_w·√m_L)."""
    assert COMPLETEP["h.3.mlp.c_fc.weight"][:3] == pytest.approx((LR / 2, LR, EPS / 4), rel=1e-12)
    assert DEPTH_MUP["h.3.mlp.c_fc.weight"][:3] == pytest.approx((LR / 2 / 2**0.5, LR / 2**0.5, EPS / 2 / 2**0.5))
    assert COMPLETEP["wte.weight"][:3] == DEPTH_MUP["wte.weight"][:3] == pytest.approx((LR, LR, EPS / 2))


# --- the rules beyond the reference's shapes ------------------------------------------------------------------

IMAGE = OmegaConf.create({"name": "cifar10", "kind": "image", "input_shape": [3, 4, 4], "num_classes": 10})


def mup_rules(arch: dict, data, **optim):
    net = build_network(OmegaConf.create(arch), data, Variant(), optim_config(mode="mup", **optim))
    return net, rules_of(net)


@pytest.mark.parametrize(("recipe", "optimizer", "block_lr"), [
    ("depth_mup", "adam", 2**-0.5), ("completep", "adam", 1.0),  # m_L^(α−1), m_L = 4 / 2
    ("depth_mup", "sgd", 1.0), ("completep", "sgd", 2.0)])       # m_L^(2α−1)
def test_a_torch_models_blocks_are_found_by_their_paths_and_scaled(recipe, optimizer, block_lr):
    """A plain torch model with ``arch.residual_scale``: its branches get m_L^-α, the parameters its blocks repeat
    (``blocks.K.…``) the recipe's LR, decay and ε factors beside μP's own rules, the rest μP's alone."""
    alpha = {"depth_mup": 0.5, "completep": 1.0}[recipe]
    arch = {"name": "torch_models:residual_mlp", "width": 32, "depth": 4, "residual_scale": 0.8}
    plain_net, plain = mup_rules(arch, IMAGE, name=optimizer, mup_base_width=16)
    net, rules = mup_rules(arch, IMAGE, name=optimizer, mup_base_width=16, mup_depth=recipe, mup_base_depth=2)
    assert net.model.residual_scale == pytest.approx(0.8 * 2**-alpha) and plain_net.model.residual_scale == 0.8
    for atom, rule, before in zip(net.atom_list(), rules, plain, strict=True):
        block = atom.role.startswith("blocks.")
        width_mult = 2.0  # every layer here has one size that grows 16 → 32
        assert rule.lr == pytest.approx(before.lr * (block_lr if block else 1.0), rel=1e-12), atom.role
        assert rule.decay == pytest.approx(block_lr if block else 1.0, rel=1e-12), atom.role
        assert rule.eps == pytest.approx(1 / width_mult / (2**alpha if block else 1.0), rel=1e-12), atom.role
        assert (rule.init, rule.output) == (before.init, before.output), atom.role  # its own initialisation


def test_the_standard_gpt_starts_each_block_layer_at_its_base_depth_scale():
    """GPT-2's 0.02/√(2L) on the residual outputs is a depth rule of its own: under a recipe every block layer
    starts as in the network of the base depth (CompleteP's initialisation does not change with depth); at the
    base depth itself every recipe is μP for width with nanoGPT-mup's ε / m_w, branches at 1."""
    arch = {"name": "standard_gpt", "width": 32, "depth": 8, "heads": 2, "residual_scale": 1.0}
    net, rules = mup_rules(arch, DATA, mup_base_width=16, mup_depth="completep", mup_base_depth=2)
    for atom, rule in zip(net.atom_list(), rules):
        base_scale = 0.02 / math.sqrt(2 * 2) if atom.role in ("attn.out", "mlp.out") else 0.02
        expected = {"input": base_scale, "hidden": base_scale / math.sqrt(2), "readout": base_scale / 2}[rule.kind]
        assert init_rms(atom) * rule.init == pytest.approx(expected, rel=1e-12), atom.role
    at_base = {**arch, "depth": 2}
    plain_net, plain = mup_rules(at_base, DATA, mup_base_width=16)
    for recipe in ("depth_mup", "completep"):
        recipe_net, recipe_rules = mup_rules(at_base, DATA, mup_base_width=16, mup_depth=recipe, mup_base_depth=2)
        assert [(r.lr, r.init, r.output, r.decay) for r in recipe_rules] == [(r.lr, r.init, r.output, r.decay)
                                                                              for r in plain]
        # but Adam's ε is nanoGPT-mup's ε / m_w in every layer (m_w = 2 here), which mup_depth=none leaves as it is
        assert {r.eps for r in recipe_rules} == {0.5} and {r.eps for r in plain} == {1.0}
        assert not [m for m in recipe_net.walk() if isinstance(m, Mul)]  # residual_scale 1: no multiplier at all


def test_bad_input_is_one_line_each_before_anything_is_built():
    from helpers import compose_config

    from modula_cli.config.validate import config_problems

    def problems(*overrides: str) -> list[str]:
        return config_problems(compose_config(*overrides))

    assert problems("arch=standard_gpt", "optim.mode=mup", "optim.mup.depth=completeP") == [
        "optim.mup.depth='completeP'; allowed: none, depth_mup, completep"]
    assert problems("arch=standard_gpt", "optim.mode=normed", "optim.mup.depth=completep") == [
        "optim.mup.depth=completep needs optim.mode=mup (got normed): the depth recipes extend μP; the modular modes "
        "weight depth through the network's masses"]
    assert problems("arch=standard_gpt", "arch.depth=3", "optim.mode=mup", "optim.mup.depth=depth_mup",
                    "optim.mup.base_depth=4") == [
        "optim.mup.base_depth=4 is above arch.depth=3: the depth recipes scale up from their base; set "
        "optim.mup.base_depth to the sweep's smallest depth or below"]
    assert problems("arch=gpt", "optim.mode=mup", "optim.mup.depth=completep") == [
        "optim.mup.depth=completep: arch.name=gpt declares no arch.residual_scale, the multiplier on its residual "
        "branches (x + s·f(x)), so the recipe does not apply: the modular networks already weight each block by "
        "1/depth; use arch=standard_gpt"]
    assert problems("arch=standard_gpt", "optim.mode=mup", "optim.mup.depth=completep",
                    "arch.residual_scale=null") == [
        "optim.mup.depth=completep: arch.name=standard_gpt declares no arch.residual_scale, the multiplier on its "
        "residual branches (x + s·f(x)), so the recipe does not apply: set it (1.0: nanoGPT's branches) and have "
        "the model's branches read it (docs/mup.md)"]
    assert problems("arch=standard_gpt", "optim.mode=mup", "optim.mup.depth=completep",
                    "arch.residual_scale=wide") == ["arch.residual_scale='wide'; must be a finite number > 0 or null"]
    assert problems("arch=standard_gpt", "optim.mode=mup") == []  # μP for width alone: as before


def test_a_torch_model_without_residual_blocks_is_refused_in_one_line():
    from modula_cli.models import ModelError

    arch = {"name": "torch_models:conv_net", "width": 8, "depth": 3, "residual_scale": 1.0}
    with pytest.raises(ModelError, match=r"^optim.mup.depth=completep: no parameter of .* repeats with arch.depth "
                                         r"\(same layers at depth 1 and 2\), so it has no residual blocks for the "
                                         r"recipe to scale; use optim.mup.depth=none$"):
        mup_rules(arch, IMAGE, mup_base_width=4, mup_depth="completep")
    arch = {"name": "torch_models:residual_mlp", "width": 8, "depth": 3}
    with pytest.raises(ModelError, match=r"^optim.mup.depth=completep: arch.name=torch_models:residual_mlp declares "
                                         r"no arch.residual_scale, .* set it \(1.0: nanoGPT's branches\) and have the "
                                         r"model's branches read it \(docs/mup.md\)$"):
        mup_rules(arch, IMAGE, mup_base_width=4, mup_depth="completep")


def test_the_coordinate_check_along_depth_compares_the_recipes(tiny_text_root, tmp_path):
    """``coord.mup_depths``: μP once per recipe, each a column of its own. The first Adam step (ε = 0) moves every
    entry by its LR exactly (m/√v = ±1), so each layer's update_rms follows its LR: along depth a block layer's
    slope is α − 1 (Depth-μP −½, CompleteP 0, plain μP 0) and every other layer's 0; at depth 1 (the base) the
    recipes train exactly as plain μP."""
    from hydra import compose, initialize_config_dir

    from modula_cli.config import CONFIG_DIR
    from modula_cli.coord.check import coord_problems, run_coord_check

    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("coord_check", overrides=[
            "arch=standard_gpt", "arch.width=16", "arch.heads=2", f"data.root={tiny_text_root}", "data.context=16",
            "train.device=cpu", "coord.axis=depth", "coord.depths=[1,2,4]", "coord.modes=[mup,unnormed]",
            "coord.mup_depths=[none,depth_mup,completep]", "coord.steps=1", "optim.mup.base_width=8",
            "optim.lr=0.01"])
    assert coord_problems(cfg) == []
    table, slope_table, verdict = run_coord_check(cfg, tmp_path)
    assert list(verdict) == ["mup", "mup+depth_mup", "mup+completep", "unnormed"]
    rms = slope_table[slope_table["quantity"] == "update_rms"].set_index(["mode", "layer"])["slope"]
    blocks = ("attn.q", "attn.k", "attn.v", "attn.out", "mlp.in", "mlp.out")
    for mode, alpha in (("mup", 1.0), ("mup+depth_mup", 0.5), ("mup+completep", 1.0), ("unnormed", 1.0)):
        for layer in (*blocks, "embed.token", "embed.position", "output"):
            expected = alpha - 1 if layer in blocks else 0.0
            assert rms[(mode, layer)] == pytest.approx(expected, abs=1e-4), (mode, layer)
    first = table[table["depth"] == 1].set_index(["mode", "layer", "step"])["delta_rms"]
    for recipe in ("mup+depth_mup", "mup+completep"):
        assert first[recipe].to_numpy() == pytest.approx(first["mup"].to_numpy(), rel=1e-6)


def test_the_coordinate_check_refuses_recipes_without_mup_in_one_line(tiny_text_root):
    from hydra import compose, initialize_config_dir

    from modula_cli.config import CONFIG_DIR
    from modula_cli.coord.check import coord_problems

    base = ["arch=standard_gpt", f"data.root={tiny_text_root}", "coord.axis=depth"]
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        no_mup = compose("coord_check", overrides=[*base, "coord.mup_depths=[completep]"])
        unknown = compose("coord_check", overrides=[*base, "coord.modes=[mup]", "coord.mup_depths=[none,complete]"])
    assert coord_problems(no_mup) == [
        "coord.mup_depths=['completep'] compares μP's depth recipes, and coord.modes=['unnormed', 'normed', "
        "'dualized'] has no mup; add it (coord.modes=[mup,unnormed])"]
    assert coord_problems(unknown) == [
        "coord.mup_depths=['none', 'complete']; a list of distinct recipes from: none, depth_mup, completep"]


def test_runs_from_before_the_recipes_keep_their_fingerprints():
    """μP without a recipe and the standard GPT's residual_scale 1.0 are the runs an earlier version trained:
    the same fingerprint, whatever the (then unread) base depth; a recipe is another run."""
    from helpers import compose_config

    from modula_cli.config.identity import fingerprint

    plain = fingerprint(compose_config("arch=standard_gpt", "optim.mode=mup"))
    older = OmegaConf.create(OmegaConf.to_container(compose_config("arch=standard_gpt", "optim.mode=mup")))
    older.arch.pop("residual_scale")
    assert fingerprint(older) == plain
    assert fingerprint(compose_config("arch=standard_gpt", "optim.mode=mup", "optim.mup.depth=none",
                                      "optim.mup.base_depth=4")) == plain
    recipes = {fingerprint(compose_config("arch=standard_gpt", "optim.mode=mup", f"optim.mup.depth={recipe}",
                                          f"optim.mup.base_depth={base}"))
               for recipe in ("depth_mup", "completep") for base in (1, 2)}
    assert len(recipes) == 4 and plain not in recipes


def test_a_run_under_a_recipe_records_it_and_a_packed_run_trains_as_separate_ones(tiny_text_root, tmp_path):
    """The training loop end to end under CompleteP with ε > 0 and weight decay (every per-layer factor in
    play): the summary names the recipe, and two LRs packed into one run train as the two runs apart."""
    from helpers import compose_config, tiny_gpt

    from modula_cli.run.trainer import train

    def config(*extra: str):
        return compose_config(*tiny_gpt(tiny_text_root, "arch=standard_gpt", "arch.depth=4", "optim.mode=mup",
                                        "optim.mup.base_width=8", "optim.mup.depth=completep",
                                        "optim.mup.base_depth=2", "optim.eps=1e-3", "optim.wd=0.1",
                                        "train.steps=6", *extra))

    packed = train(config("optim.lr=[0.004,0.02]"), tmp_path / "packed")
    assert packed.packed and [m["lr"] for m in packed.members] == [0.004, 0.02]
    for lr, member in zip((0.004, 0.02), packed.members):
        alone = train(config(f"optim.lr={lr}"), tmp_path / f"alone_{lr}").summary
        assert (alone["mup_depth"], alone["mup_base_depth"]) == ("completep", 2)
        assert member["train_loss"] == pytest.approx(alone["train_loss"], abs=2e-4)
        assert member["fingerprint"] == alone["fingerprint"]
    assert packed.members[0]["train_loss"] != pytest.approx(packed.members[1]["train_loss"], abs=1e-3)


def test_a_torch_models_blocks_are_one_line_each_along_depth(cifar_root, tmp_path):
    """Along depth the coordinate check averages a role over its blocks; a torch model's roles are its paths, so
    the block index is masked (``blocks.*.0.weight``): every layer has a slope at every depth, none is taken
    for a frozen one, and the recipes' columns stand beside μP's."""
    from hydra import compose, initialize_config_dir

    from modula_cli.config import CONFIG_DIR
    from modula_cli.coord.check import run_coord_check

    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("coord_check", overrides=[
            "arch.name=torch_models:residual_mlp", "arch.width=16", "+arch.residual_scale=1.0", "data=cifar10",
            f"data.root={cifar_root}", "data.augment=none", "train.device=cpu", "coord.axis=depth",
            "coord.depths=[1,2,4]", "coord.modes=[mup]", "coord.mup_depths=[none,completep]", "coord.steps=1",
            "optim.mup.base_width=8"])
    _, slope_table, verdict = run_coord_check(cfg, tmp_path)
    layers = list(slope_table["layer"].unique())
    assert layers == ["embed.weight", "embed.bias", "blocks.*.0.weight", "blocks.*.0.bias", "blocks.*.2.weight",
                      "blocks.*.2.bias", "head.weight"]
    assert slope_table["points"].eq(3).all() and list(verdict) == ["mup", "mup+completep"]
    assert not any("no slope" in text for text in verdict.values()), verdict
