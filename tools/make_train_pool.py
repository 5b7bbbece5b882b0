"""Build data/train-pool.jsonl: training prompts for self-distilling drafter models.

The pool mixes creative prompt-enhancement requests (text-to-video, image-to-video, text-to-image, image-to-image,
the image-* rows with a caption of the input image) and general requests (chat, code, stem, math). Rows come from
hand-written vocabularies combined through varied templates, plus hand-written rows; a second round of 560
hand-written rows (train-pool-extra.jsonl: freer phrasing than templates give) is appended after the first
1600. All text here is original.

The pool must stay disjoint from the bundled benchmark sets (prompt-enhancement.jsonl, fireworks.jsonl): after
lowercasing and collapsing whitespace no training prompt may equal, contain or be contained in a benchmark prompt,
and none may share an 8-word sequence with one (words split on whitespace, and separately as alphanumeric runs).
Image captions are held to the same rules against the benchmark captions. Offending candidates are dropped and
regenerated.

Deterministic: a fixed seed, no dependence on set or hash order. Run with the project venv:

    .venv/bin/python tools/make_train_pool.py
"""

from __future__ import annotations

import json
import random
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Callable, Iterable

SEED = 20250611
DATA = Path(__file__).resolve().parents[1] / "data"
OUT = DATA / "train-pool.jsonl"
EXTRA = DATA / "train-pool-extra.jsonl"   # second-round hand-written rows {category, prompt, image_caption}
BENCHMARKS = ("prompt-enhancement.jsonl", "fireworks.jsonl")
NGRAM = 8
TARGETS = {
    "text-to-video": 250, "image-to-video": 250, "text-to-image": 250, "image-to-image": 250,
    "chat": 150, "code": 150, "stem": 150, "math": 150,
}


# --------------------------------------------------------------------------------------------------------------
# Disjointness rules (shared with tests/specbench/test_train_pool.py, which re-implements them independently)
# --------------------------------------------------------------------------------------------------------------

def normalize(text: str) -> str:
    return " ".join(text.lower().split())


def ngrams(text: str, n: int = NGRAM) -> set[tuple[str, ...]]:
    """Word n-grams of the normalized text, over whitespace tokens and over alphanumeric runs."""
    norm = normalize(text)
    grams: set[tuple[str, ...]] = set()
    for tokens in (norm.split(), re.findall(r"[a-z0-9]+", norm)):
        grams.update(tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1))
    return grams


class Guard:
    """Accepts a candidate only if it is new to the pool and disjoint from the benchmark sets."""

    def __init__(self, prompts: Iterable[str], captions: Iterable[str]):
        self.prompts = sorted({normalize(p) for p in prompts})
        self.prompt_grams = set().union(*(ngrams(p) for p in self.prompts))
        self.captions = sorted({normalize(c) for c in captions})
        self.caption_grams = set().union(*(ngrams(c) for c in self.captions))
        self.seen: set[str] = set()
        self.rejected: Counter[str] = Counter()

    @staticmethod
    def _clash(text: str, pool: list[str], grams: set) -> str | None:
        norm = normalize(text)
        for other in pool:
            if norm == other:
                return "exact"
            if norm in other or other in norm:
                return "containment"
        if ngrams(norm) & grams:
            return "8-gram"
        return None

    def check(self, prompt: str, caption: str | None) -> bool:
        reason = None
        if not prompt.strip():
            reason = "empty"
        elif normalize(prompt) in self.seen:
            reason = "duplicate"
        else:
            reason = self._clash(prompt, self.prompts, self.prompt_grams)
            if reason is None and caption is not None:
                reason = self._clash(caption, self.captions, self.caption_grams)
                reason = reason and f"caption {reason}"
        if reason:
            self.rejected[reason] += 1
            return False
        self.seen.add(normalize(prompt))
        return True


# --------------------------------------------------------------------------------------------------------------
# Text helpers
# --------------------------------------------------------------------------------------------------------------

def tidy(text: str) -> str:
    text = re.sub(r"[ \t]+", " ", text).strip()
    text = re.sub(r" +([,.?!:;])", r"\1", text)
    text = re.sub(r",\s*,", ",", text)
    text = re.sub(r"\.\s*\.(?!\.)", ".", text)
    text = re.sub(r",\s*([.?!])", r"\1", text)
    return text.strip(" ,")


def cap(text: str) -> str:
    return text[:1].upper() + text[1:] if text else text


class Gen:
    """A seeded random source with small helpers for phrasing."""

    def __init__(self, seed: int):
        self.r = random.Random(seed)
        self.decks: dict[str, list[int]] = {}

    def pick(self, seq):
        return seq[self.r.randrange(len(seq))]

    def sample(self, seq, k):
        return self.r.sample(list(seq), k)

    def chance(self, p: float) -> bool:
        return self.r.random() < p

    def maybe(self, text: str, p: float = 0.5) -> str:
        return text if self.chance(p) else ""

    def randint(self, a: int, b: int) -> int:
        return self.r.randint(a, b)

    def form(self, key: str, n: int) -> int:
        """Which of n phrasings to use next: a shuffled deck per key, so each template gets an even share."""
        deck = self.decks.setdefault(key, [])
        if not deck:
            deck.extend(range(n))
            self.r.shuffle(deck)
        return deck.pop()

    def case(self, text: str, lower: float = 0.35) -> str:
        """Real users: some type in lowercase, some capitalize, some drop the final period."""
        roll = self.r.random()
        if roll < lower:
            text = text[:1].lower() + text[1:]
            return text.rstrip(".") if self.chance(0.6) else text
        text = cap(text)
        if roll > 0.85 and text.endswith("."):
            text = text[:-1]
        return text


# --------------------------------------------------------------------------------------------------------------
# Shared creative vocabulary
# --------------------------------------------------------------------------------------------------------------

LIGHTING = [
    "golden hour light", "soft overcast light", "harsh midday sun", "blue hour light", "warm tungsten practicals",
    "flickering candlelight", "cold fluorescent light", "neon reflections on wet surfaces",
    "low backlight from the sun",
    "silver moonlight", "dappled light through leaves", "diffused foggy light", "hard top light with deep shadows",
    "orange sodium streetlights", "rim light against a dark background", "pastel dawn light", "stormy grey light",
    "lamplight and long shadows", "bright high-key daylight", "teal and amber color grade",
]
LENSES = [
    "35mm", "50mm lens", "anamorphic lens", "shot on 16mm film", "85mm with shallow depth of field", "24mm wide angle",
    "long telephoto lens", "super 8 look", "large format look", "grainy VHS look", "clean digital look",
    "Kodak-style film grain", "vintage 1970s lenses", "fisheye lens", "macro lens",
]
MOODS = [
    "melancholic", "joyful", "tense", "dreamy", "nostalgic", "quiet and contemplative", "playful", "epic", "eerie",
    "romantic", "gritty", "hopeful", "lonely", "whimsical", "calm", "chaotic", "cozy", "mysterious",
]
DURATIONS = [
    "4 seconds", "5s", "6 sec", "about 8 seconds", "10 seconds", "3 seconds", "12s", "7 seconds", "5 sec", "under 10s",
]
ASPECTS = ["16:9", "9:16", "vertical", "2.39:1 widescreen", "1:1", "4:3", "21:9", "portrait orientation"]
VIDEO_STYLES = [
    "photoreal", "3D animated feature style", "stop-motion claymation", "hand-drawn 2D animation",
    "watercolor animation",
    "anime style", "black and white film noir", "documentary style", "music video look", "retro 1970s film",
    "found footage", "low-poly 3D", "cel-shaded", "paper cutout animation", "dreamlike surreal", "hyperreal CGI",
    "old silent film look", "cinematic", "pastel storybook look", "gritty handheld realism",
]
CAMERA_MOVES = [
    "slow dolly in", "slow orbit around the subject", "camera pans left to right", "push in from wide to close-up",
    "handheld and a little shaky", "static tripod shot", "crane up at the end", "drone pulls back and rises",
    "tracking alongside at walking pace", "whip pan at the end", "dolly zoom", "slow tilt up", "low angle tracking",
    "top-down overhead view", "arc shot around the subject", "rack focus halfway through", "gentle drift to the right",
    "first-person POV", "slow push out", "steady side-scrolling shot", "camera circles once then settles",
    "locked-off wide shot", "slow zoom in", "snap zoom", "floating gimbal move",
]
MOVES_ONLY = [m for m in CAMERA_MOVES if "static" not in m and "locked" not in m]

# (phrase, setting group). Static cores act in place, moving cores travel.
STATIC_CORES = [
    ("a potter shaping a tall vase on a spinning wheel", "indoor"),
    ("a watchmaker fitting a tiny spring under a magnifying lamp", "indoor"),
    ("an old woman threading a needle by a window", "indoor"),
    ("a street musician playing a battered accordion", "urban"),
    ("a blacksmith hammering a glowing horseshoe", "indoor"),
    ("a bartender pouring a layered cocktail", "indoor"),
    ("a calligrapher painting one large brushstroke character", "indoor"),
    ("a barber giving a straight-razor shave", "indoor"),
    ("two old friends slamming down dominoes on a folding table", "urban"),
    ("a boy building a sandcastle with a plastic bucket", "shore"),
    ("a tattoo artist outlining a rose on a forearm", "indoor"),
    ("a violinist tuning her instrument", "indoor"),
    ("a painter flicking blue paint at a giant canvas", "indoor"),
    ("a florist wrapping tulips in brown paper", "indoor"),
    ("a beekeeper lifting a frame dripping with honey", "outdoor"),
    ("a sushi chef slicing tuna in one long stroke", "indoor"),
    ("a puppeteer working a wooden marionette", "urban"),
    ("a monk sweeping fallen leaves", "outdoor"),
    ("a glassblower turning a glowing blob of glass on a pipe", "indoor"),
    ("a grandfather teaching his granddaughter to tie a fishing knot", "river"),
    ("a woman reading a handwritten letter and starting to cry", "indoor"),
    ("a DJ twisting knobs on a mixer", "indoor"),
    ("a small robot assembling a wooden chair", "indoor"),
    ("a girl blowing a huge bubblegum bubble until it pops", "urban"),
    ("a fortune teller flipping over tarot cards", "indoor"),
    ("a man fixing a bicycle chain with greasy hands", "urban"),
    ("a teenager practicing a card trick in front of a mirror", "indoor"),
    ("a woman planting seedlings in a raised bed", "outdoor"),
    ("a fisherman hauling in a net full of silver fish", "river"),
    ("a chess grandmaster staring down at the board", "indoor"),
    ("a cellist playing alone with eyes closed", "indoor"),
    ("a little girl feeding ducks from a paper bag", "river"),
    ("a tailor chalking lines on a bolt of wool", "indoor"),
    ("a scientist watching a liquid in a flask turn purple", "indoor"),
    ("an astronaut planting a flag made of paper", "outdoor"),
    ("a woodcarver carving a small bear from a log", "outdoor"),
    ("a cook flipping a giant paella pan", "outdoor"),
    ("a toddler trying to catch soap bubbles", "outdoor"),
    ("a street artist spraying a mural of a tiger", "urban"),
    ("a lone drummer practicing on an upturned bucket", "urban"),
]
MOVING_CORES = [
    ("a courier on a scooter weaving through traffic", "urban"),
    ("a girl on roller skates gliding along a boardwalk", "shore"),
    ("a man in a suit sprinting to catch a tram", "urban"),
    ("a dog sled team racing across a frozen plain", "snow"),
    ("a paraglider drifting overhead", "outdoor"),
    ("a horse-drawn carriage rattling over cobblestones", "urban"),
    ("a kid pedaling a bicycle with streamers on the handlebars", "urban"),
    ("a lone hiker with a huge backpack", "outdoor"),
    ("a kayaker paddling between mossy boulders", "river"),
    ("newlyweds running through a shower of flower petals", "outdoor"),
    ("a waiter balancing a tray of drinks through a packed terrace", "urban"),
    ("a steam locomotive puffing along", "desert"),
    ("a pickup truck bouncing along a dirt track", "desert"),
    ("a parade float shaped like a giant fish rolling down a boulevard", "urban"),
    ("a young monk walking barefoot across a rope bridge", "outdoor"),
    ("a couple waltzing across an empty ballroom", "indoor"),
    ("a surfer paddling out through whitewater", "shore"),
    ("a delivery drone carrying a parcel over rooftops", "urban"),
    ("a cyclist grinding up a steep climb", "outdoor"),
    ("a knight on horseback charging at full gallop", "outdoor"),
    ("a skier carving through fresh powder", "snow"),
    ("an old tram climbing a steep hill", "urban"),
    ("a teenager skateboarding down a steep hill", "urban"),
    ("a girl chasing a runaway red umbrella", "urban"),
    ("a marching band turning a corner", "urban"),
    ("a motorcyclist leaning into a curve on the coast road", "shore"),
    ("a tiny sailboat tacking against the wind", "river"),
    ("a woman in a ball gown running barefoot down the street", "urban"),
    ("a pack of kids racing go-karts made from crates", "urban"),
    ("a mail carrier trudging through knee-deep snow", "snow"),
    ("a camel caravan moving in a long line", "desert"),
    ("a runaway shopping cart rolling down a hill", "urban"),
    ("an ice skater spinning across a frozen pond", "snow"),
    ("a lantern-lit boat drifting slowly", "river"),
    ("a giant tortoise-shaped mech lumbering along", "outdoor"),
]
SETTINGS = {
    "indoor": [
        "in a cramped Hong Kong apartment", "in a dusty attic workshop", "in a candlelit monastery hall",
        "in a sunlit studio with paint-splattered floors", "inside a tiny shop crowded with shelves",
        "in a steamy basement kitchen", "in a high-ceilinged Victorian parlor", "in a greenhouse full of orchids",
        "inside a space station module", "in a wood-paneled ski lodge", "in a backstage dressing room",
        "in a converted warehouse loft", "in a dim jazz bar", "inside an old lighthouse keeper's room",
        "in a school science lab after hours",
    ],
    "urban": [
        "in a rainy Amsterdam alley", "on a crowded street in Hanoi", "in a neon-lit arcade district",
        "at a seaside market in Marseille", "on a rooftop in Mumbai during a heatwave", "in a quiet plaza in Oaxaca",
        "in a cyberpunk megacity", "on a snowy Brooklyn stoop", "under an elevated train line in Chicago",
        "in a medieval walled town", "on a cobbled street in Prague", "in a sun-bleached Havana street",
        "outside a 24-hour laundromat", "in a crowded bazaar in Istanbul", "in front of a shuttered cinema",
    ],
    "outdoor": [
        "in a sunflower field", "on a misty Scottish moor", "in the Dolomites", "across rolling Tuscan hills",
        "in an abandoned orchard", "at the edge of a redwood forest", "in a windswept Patagonian valley",
        "on a lavender farm", "in a meadow full of wildflowers", "near a crumbling castle",
        "on a terraced hillside in Peru",
    ],
    "desert": [
        "in the red desert of Wadi Rum", "across a salt flat at noon", "across the dunes of the Sahara",
        "in the Atacama at dusk", "through Monument Valley", "across the Australian outback",
    ],
    "shore": [
        "on a foggy shoreline", "along a crowded beach in Rio", "at a rocky Cornish cove",
        "on a black sand beach in Iceland",
        "on a windy Atlantic coast", "in a little surf town in Portugal",
    ],
    "river": [
        "at a lake in the Canadian Rockies", "on the banks of a wide muddy river", "beside a canal in Venice",
        "at a quiet harbor at dawn", "in a floating village in Cambodia", "on a misty Finnish lake",
    ],
    "snow": [
        "in a snowbound Alpine village", "across the Siberian tundra", "through a silent birch forest in winter",
        "in a blizzard at the edge of a glacier", "under the northern lights in Lapland",
    ],
}
SHOTS_STATIC = [
    "slow dolly in on", "slow push in on", "low angle shot of", "high angle shot looking down at",
    "wide shot of", "medium close-up of", "extreme close-up on the hands of", "locked-off static shot of",
    "over-the-shoulder shot behind", "slow orbit around", "slow-motion close-up of", "gentle pull back from",
    "profile shot of", "handheld close shot of", "overhead shot of",
]
SHOTS_MOVING = [
    "tracking shot following", "handheld shot chasing", "aerial drone shot following", "side-on tracking shot of",
    "steadicam shot following", "low angle tracking shot of", "wide shot of", "crane shot rising above",
    "a single long take following", "telephoto shot of", "POV from behind", "drone shot circling",
]
EXTRA_DETAILS = [
    "a few pigeons scattering", "string lights overhead", "laundry hanging between windows", "a stray cat watching",
    "falling petals", "steam from a street vent", "a distant ferris wheel", "kids playing far off",
    "a radio playing somewhere", "paper lanterns swaying", "dust floating in the light", "a dog barking off screen",
    "smoke curling up", "a train passing far away", "puddles reflecting the sky", "a flock of birds",
]

WHIMSICAL = [
    "a tiny dragon learning to breathe fire and sneezing sparks instead",
    "a raccoon trying to sneak a cupcake off a picnic table",
    "a snowman melting in a heatwave and looking annoyed about it",
    "a teapot that grows legs and walks off the table",
    "a goldfish escaping its bowl in a bubble and floating around the kitchen",
    "a penguin delivering mail in a tiny blue cap",
    "a houseplant slowly creeping toward the window to get more sun",
    "a paper airplane flying through an entire apartment building",
    "a grumpy cloud raining only on one man",
    "a moth in love with a lightbulb",
    "an octopus playing four keyboards at once",
    "a hamster driving a toy car around a living room",
    "a crow stealing a shiny key and flying off with it",
    "a knitted sweater unraveling itself into a cat",
    "a clockwork bird hatching from a brass egg",
    "a family of mice having a candlelit dinner in a dollhouse",
    "a giant tortoise carrying a tiny village on its shell",
    "a sleepy bear trying to make pancakes",
    "an origami crane unfolding and flying away",
    "a toaster launching toast into the stratosphere",
    "a lighthouse that walks along the coast at night",
    "a hedgehog rolling down a hill like a bowling ball",
    "a tiny astronaut exploring a garden like it is another planet",
    "a library where the books fly like birds",
]

NATURE_CORES = [
    "a barn owl gliding low over a frosted meadow", "sea otters cracking shellfish on their bellies",
    "a chameleon slowly shifting color on a branch", "salmon leaping up a waterfall while a bear waits",
    "monarch butterflies blanketing a pine tree", "lightning striking a lone tree on a plain",
    "a pack of wolves crossing a frozen river", "a mantis shrimp punching a snail shell",
    "sand dunes shifting in a strong wind", "a giant tortoise chewing a cactus pad",
    "baby sea turtles scrambling toward the surf at night", "bioluminescent waves breaking on a dark beach",
    "a kingfisher diving into a clear stream", "frost crystals growing across a window pane",
    "a garden spider spinning its web at dawn", "elephants taking a dust bath at a waterhole",
    "a geyser erupting on a cold morning", "flamingos taking off from a pink lake",
    "a lynx stalking a hare through birch trees", "a puffin landing on a cliff with fish in its beak",
    "manta rays circling in deep blue water", "the tide racing across wide mudflats",
    "a mother orangutan carrying her baby through the canopy", "a snowshoe hare changing coat as winter arrives",
    "storm clouds building over a mountain range", "a swarm of starlings twisting into shapes at sunset",
    "a bee collecting pollen inside a foxglove", "a crocodile sliding silently into a river",
    "a mountain goat balancing on a cliff ledge", "a seed sprouting and pushing through soil",
    "a bald eagle snatching a fish from a lake", "a jellyfish bloom drifting through a kelp forest",
    "an arctic fox curled up in a snowstorm", "fireworks of pollen bursting from a pine in spring",
    "a dragonfly emerging from its larval shell", "a herd of bison steaming in the winter cold",
    "a sloth climbing down a tree at a painfully slow pace", "a cheetah accelerating across the savanna",
    "rain falling on a lotus pond", "ice floes grinding together in the Arctic",
    "a humming swarm of bats leaving a cave at dusk", "a tree frog calling with its throat puffed up",
    "clouds pouring over a mountain ridge like a waterfall", "the moon rising huge over a desert",
    "a red panda munching bamboo in the rain", "a beaver dragging a branch across a pond",
    "a cuttlefish flashing patterns across its skin", "a tide pool crab defending its rock",
    "a snowy owl hunting over the tundra", "autumn leaves drifting down a forest stream",
]
NATURE_MODS = [
    "documentary style", "telephoto lens", "slow motion", "steady wide shot", "natural light",
    "wildlife documentary look", "patient locked-off camera", "shot from a hide", "macro detail",
    "time-lapse", "aerial view", "4k", "hyperlapse", "eye-level with the animal", "golden hour",
    "misty morning", "overcast", "narrator-ready pacing", "no people in frame",
]


# --------------------------------------------------------------------------------------------------------------
# Scenes for image-* rows: captions of the input image and what can move or change in it
# --------------------------------------------------------------------------------------------------------------

PEOPLE = [  # (description, noun, pronoun, clothing item)
    ("a young woman with a shaved head in an orange puffer jacket", "woman", "she", "jacket"),
    ("an elderly man in a flat cap and a tweed coat", "man", "he", "coat"),
    ("a teenage girl in a plaid school uniform", "girl", "she", "uniform"),
    ("a middle-aged nurse in teal scrubs", "nurse", "she", "scrubs"),
    ("a bearded man in a faded flannel shirt", "man", "he", "shirt"),
    ("a little boy in a green dinosaur costume", "boy", "he", "costume"),
    ("a tall man in a black turtleneck and round glasses", "man", "he", "turtleneck"),
    ("a woman in a long red wool coat", "woman", "she", "coat"),
    ("a gray-haired woman wearing a denim apron", "woman", "she", "apron"),
    ("a young man with box braids in a white hoodie", "man", "he", "hoodie"),
    ("a freckled girl in a striped sweater", "girl", "she", "sweater"),
    ("a cyclist in a yellow racing jersey", "cyclist", "she", "jersey"),
    ("a dancer in a flowing cobalt skirt", "dancer", "she", "skirt"),
    ("a man in a rumpled gray suit with a loosened tie", "man", "he", "suit"),
    ("an old woman in a floral headscarf", "woman", "she", "headscarf"),
    ("a boy in a bright yellow raincoat", "boy", "he", "raincoat"),
    ("a woman in a white linen shirt and a straw hat", "woman", "she", "hat"),
    ("a young chef in a black apron", "chef", "he", "apron"),
    ("a skateboarder in a knit beanie and baggy jeans", "skateboarder", "he", "beanie"),
    ("a grandfather in a cardigan with elbow patches", "grandfather", "he", "cardigan"),
    ("a woman with curly gray hair in a mustard sweater", "woman", "she", "sweater"),
    ("a young Japanese man in a navy peacoat", "man", "he", "peacoat"),
    ("a Ghanaian woman in a bright kente-print dress", "woman", "she", "dress"),
    ("a teenage boy in a varsity jacket", "boy", "he", "jacket"),
    ("a woman in a green hijab and a camel trench coat", "woman", "she", "coat"),
    ("a man with a silver ponytail in a leather vest", "man", "he", "vest"),
    ("a construction worker in a hard hat and a hi-vis vest", "worker", "he", "vest"),
    ("a violinist in a black concert dress", "violinist", "she", "dress"),
    ("a hiker in a red fleece with a large backpack", "hiker", "she", "fleece"),
    ("a young Mexican woman in an embroidered blouse", "woman", "she", "blouse"),
    ("a Sikh man in a saffron turban and a blue blazer", "man", "he", "blazer"),
    ("a girl of about eight in a sparkly tutu and rain boots", "girl", "she", "tutu"),
]
PERSON_PLACES = [
    "standing on a windy harbor pier", "sitting on the front steps of a library", "leaning against a graffiti wall",
    "sitting at a small cafe table with an espresso", "standing in tall grass at sunset",
    "waiting at a bus stop in the rain",
    "standing in a sunlit kitchen", "sitting on a park bench under an oak tree",
    "standing on a rooftop with the skyline behind",
    "sitting in the window seat of a train", "standing in front of a tall bookshelf",
    "standing on a snowy forest trail",
    "sitting cross-legged on a living room rug", "standing at the edge of a lake at dawn",
    "standing in a crowded subway car",
    "sitting at a desk with a laptop", "standing under a cherry tree in bloom", "standing on top of a sand dune",
    "standing in a greenhouse among tomato plants", "sitting on a low wall by the sea",
    "standing in an empty parking lot at night",
    "standing in a wheat field", "sitting on a sofa in a bright apartment", "standing in a doorway of an old farmhouse",
]
PERSON_EXTRAS = [
    "The photo is taken at eye level.", "{P} is looking straight at the camera.", "{P} is looking off to the side.",
    "The background is slightly blurred.", "It is late afternoon.", "The shot is framed from the waist up.",
    "It looks like a phone snapshot.", "The colors are soft and muted.", "{P} has a neutral expression.",
    "The shot is a full-length view.", "Light comes from the left.", "",
]
PERSON_ACTIONS = [
    "turn and look at the camera", "wave and smile", "start walking toward the camera", "laugh at something off camera",
    "take a deep breath and close {pos} eyes", "check {pos} phone and frown", "do a small happy shuffle dance",
    "wave goodbye and walk out of frame to the left", "nod slowly like {pn} agrees with someone",
    "turn around and walk away",
    "look up at the sky and squint", "blow a kiss to the camera", "stretch {pos} arms above {pos} head",
    "sip from a cup and look out into the distance", "shiver and pull {pos} {cloth} tighter", "sneeze, then laugh",
    "glance over {pos} shoulder nervously", "give a thumbs up", "talk to someone off camera with natural hand gestures",
    "tuck {pos} hair behind {pos} ear and smile", "jump in the air with excitement",
    "slowly raise a hand to shade {pos} eyes",
]
ANIMALS = [  # (caption, noun, actions in base form)
    ("A black labrador lying on a wooden porch with its chin resting on its paws.", "dog",
     ["lift its head and thump its tail", "yawn and stretch", "perk up its ears at a sound"]),
    ("A white rabbit sitting in clover in a backyard garden.", "rabbit",
     ["twitch its nose and hop away", "nibble a clover leaf", "stand up on its hind legs"]),
    ("A border collie standing alert on a hillside with sheep scattered far behind it.", "dog",
     ["run down the hill toward the sheep", "turn its head toward the camera", "crouch low and wait"]),
    ("A ginger kitten peeking out of a cardboard box on a kitchen floor.", "kitten",
     ["pop its head up and look around", "bat at something off screen", "climb out of the box"]),
    ("A gray heron standing in shallow water at the edge of a reed bed.", "heron",
     ["strike at a fish", "spread its wings and take off", "take one slow step forward"]),
    ("A pug in a tiny knitted sweater sitting on a velvet sofa.", "pug",
     ["tilt its head", "sneeze and shake its head", "lie down with a sigh"]),
    ("A brown bear standing on a rock in the middle of a fast river.", "bear",
     ["swipe at the water", "look upstream", "lumber off the rock"]),
    ("A peacock with its tail fanned out on a palace lawn.", "peacock",
     ["shake its tail feathers", "turn slowly in a circle", "fold its tail and walk away"]),
    ("A sloth hanging from a branch in a rainforest canopy.", "sloth",
     ["very slowly reach for the next branch", "turn its head and blink", "scratch its belly"]),
    ("Two goats standing on a stone wall in a mountain village.", "goats",
     ["butt heads playfully", "chew and stare at the camera", "hop down off the wall one after the other"]),
    ("A Siamese cat sitting on a bookshelf next to a stack of paperbacks.", "cat",
     ["flick its tail", "jump down off the shelf", "push one paperback off the edge"]),
    ("A golden eagle perched on a dead pine branch against a pale sky.", "eagle",
     ["spread its wings and launch into the air", "turn its head sharply", "ruffle its feathers"]),
    ("A hamster holding a sunflower seed in a cage full of wood shavings.", "hamster",
     ["stuff the seed into its cheek", "scurry into its little house", "sniff the air"]),
    ("A koala clinging to a eucalyptus trunk with its eyes half closed.", "koala",
     ["chew a eucalyptus leaf", "slowly climb higher", "blink sleepily"]),
    ("A dachshund in a yellow raincoat standing on a wet sidewalk.", "dachshund",
     ["shake off the rain", "trot forward", "sniff a puddle"]),
    ("A flock of sheep grazing on a green slope above a stone cottage.", "sheep",
     ["graze and slowly wander", "look up all at once", "move together down the slope"]),
    ("A red squirrel sitting on a mossy log holding an acorn.", "squirrel",
     ["nibble the acorn", "dart up a tree", "flick its tail"]),
    ("A green frog sitting on a lily pad in a still pond.", "frog",
     ["croak with its throat puffing out", "leap into the water", "catch a fly with its tongue"]),
    ("A husky lying in snow, with one blue eye and one brown eye.", "husky",
     ["howl at the sky", "roll onto its back in the snow", "stand up and shake off the snow"]),
    ("An elephant calf standing beside its mother at a watering hole.", "calf",
     ["spray water with its trunk", "flap its ears", "wobble after its mother"]),
    ("A barn owl sitting on a hay bale inside a dim barn.", "owl",
     ["turn its head almost all the way around", "blink slowly", "take off silently"]),
    ("A tortoise crossing a sandy garden path.", "tortoise",
     ["keep walking very slowly", "pull its head into its shell", "munch on a dandelion"]),
    ("A horse with a braided mane standing in a sunny stable doorway.", "horse",
     ["snort and toss its head", "step out into the sunlight", "swish its tail"]),
    ("A fluffy white cat sitting in front of a glowing laptop screen.", "cat",
     ["paw at the screen", "yawn widely", "lie down on the keyboard"]),
    ("A penguin standing on an ice floe above dark water.", "penguin",
     ["waddle to the edge and dive in", "flap its flippers", "look around curiously"]),
    ("Two parakeets perched together on a swing in a cage.", "parakeets",
     ["preen each other", "swing back and forth", "chirp and bob their heads"]),
    ("A bulldog puppy chewing a rope toy on a shaggy rug.", "puppy",
     ["tug the rope toy and growl playfully", "roll over", "drop the toy and look up"]),
    ("A fox sitting at the edge of a snowy field at dusk.", "fox",
     ["prick its ears and pounce", "trot off toward the trees", "curl its tail around its paws"]),
]
ANIMAL_ACCESSORIES = [
    "a tiny crown", "a bow tie", "a pair of heart-shaped sunglasses", "a little wizard hat", "a red bandana",
    "a knitted scarf", "a flower crown", "a pirate hat", "a birthday party hat", "a tiny backpack",
]
SCENES = [  # (caption, kind, motion clauses, removable items)
    ("A misty valley with terraced tea fields and a dirt path winding up the hill.", "landscape",
     ["mist drifts slowly through the valley", "the tea bushes shiver in the wind"], ["the dirt path"]),
    ("A rocky coastline with waves breaking against black cliffs under a gray sky.", "landscape",
     ["the waves crash and foam", "the clouds move fast overhead", "sea spray blows off the rocks"], []),
    ("A field of red poppies with an old stone wall and a single oak tree.", "landscape",
     ["the poppies sway", "the oak leaves rustle"], ["the stone wall", "the oak tree"]),
    ("A desert canyon at sunset with long shadows across red sandstone walls.", "landscape",
     ["the shadows stretch as the sun sinks", "dust blows across the canyon floor"], []),
    ("A frozen waterfall in a snowy forest with icicles hanging from the rocks.", "landscape",
     ["snow falls gently", "a trickle of water runs under the ice"], []),
    ("A bamboo grove with a narrow stone path and paper lanterns along the edge.", "landscape",
     ["the bamboo sways and creaks", "the lanterns flicker"], ["the lanterns"]),
    ("A quiet beach at low tide with tide pools and a weathered wooden groyne.", "landscape",
     ["the shallow water shimmers", "a gull walks along the groyne"], ["the wooden groyne"]),
    ("An autumn forest road covered in yellow leaves with a red pickup truck parked on the side.", "landscape",
     ["leaves drift down onto the road", "light flickers through the branches"], ["the red pickup truck"]),
    ("Rolling green hills under a lilac sky with a row of wind turbines on the ridge.", "landscape",
     ["the turbine blades turn", "the grass ripples in waves"], ["the wind turbines"]),
    ("A mountain lake at dawn with a wooden canoe pulled up on the pebbles.", "landscape",
     ["mist rises off the water", "tiny waves lap at the canoe"], ["the canoe"]),
    ("A tropical waterfall in the jungle with ferns and a small rope bridge above it.", "landscape",
     ["the water pours and mist billows", "the rope bridge sways slightly", "ferns bob in the spray"],
     ["the rope bridge"]),
    ("An Alpine meadow full of wildflowers with cows grazing near a wooden hut.", "landscape",
     ["the flowers nod in the breeze", "the cows swish their tails", "clouds slide over the peaks"],
     ["the cows", "the wooden hut"]),
    ("A salt flat reflecting the sky like a mirror, with one tiny figure far away.", "landscape",
     ["clouds glide across the reflection", "the figure walks slowly"], ["the tiny figure"]),
    ("A steep narrow street in Lisbon with a yellow tram and laundry hanging from balconies.", "city",
     ["the tram creeps up the hill", "the laundry flutters on the balconies"], ["the tram", "the laundry"]),
    ("A busy crosswalk in Seoul at night under rows of glowing shop signs.", "city",
     ["people stream across the crosswalk", "the shop signs flicker and change"], []),
    ("A small harbor town with pastel houses and fishing boats at anchor.", "city",
     ["the boats bob on the water", "gulls circle overhead"], ["the fishing boats"]),
    ("A rainy side street in Paris with a cafe awning and empty wicker chairs.", "city",
     ["rain falls and ripples the puddles", "water drips from the awning"], ["the wicker chairs"]),
    ("A desert gas station at dusk with a flickering sign and a single parked car.", "city",
     ["the sign buzzes and flickers", "a tumbleweed rolls past"], ["the parked car"]),
    ("A New York rooftop with a wooden water tower and the skyline behind it.", "city",
     ["clouds roll over the skyline", "steam drifts from a vent"], ["the water tower"]),
    ("A covered market hall with hanging lamps over fruit stalls.", "city",
     ["the lamps sway slightly", "shoppers drift between the stalls"], ["the hanging lamps"]),
    ("A canal lined with houseboats and bare winter trees.", "city",
     ["the water ripples past the houseboats", "a few dry leaves blow across the towpath"], ["the houseboats"]),
    ("A suburban street with matching houses and a kid's bike lying on a lawn.", "city",
     ["a sprinkler sweeps across the lawn", "leaves skitter along the sidewalk"], ["the bike"]),
    ("Stone steps leading up through cedar trees to a red shrine gate.", "city",
     ["sunbeams shift between the cedars", "a few leaves fall on the steps"], ["the shrine gate"]),
    ("A Ferris wheel on a seaside amusement pier under a cloudy sky.", "city",
     ["the Ferris wheel turns slowly", "waves roll in under the pier"], ["the Ferris wheel"]),
    ("A cozy reading nook with a window seat, patterned cushions and a stack of books.", "interior",
     ["the curtain moves slightly", "dust motes float in the sunlight"], ["the stack of books", "the cushions"]),
    ("A small bakery counter with trays of pastries and an old brass cash register.", "interior",
     ["steam drifts up from the pastries", "a ceiling fan turns overhead"], ["the cash register"]),
    ("A minimalist white kitchen with a bowl of lemons on the island.", "interior",
     ["sunlight slowly moves across the counter", "a thin curl of steam rises from a kettle"], ["the bowl of lemons"]),
    ("A home recording studio with guitars on the wall and a mixing desk.", "interior",
     ["the level meters on the desk bounce", "a small lamp flickers"], ["the guitars"]),
    ("A classroom with wooden desks, a green chalkboard and sun through tall windows.", "interior",
     ["dust floats in the sunbeams", "the pages of an open book flip"], ["the chalkboard"]),
    ("A teenager's messy bedroom with band posters, a gaming chair and clothes on the floor.", "interior",
     ["the monitor glow pulses", "the chair slowly spins"], ["the clothes on the floor", "the posters"]),
    ("A grand hotel lobby with a crystal chandelier and a marble staircase.", "interior",
     ["the chandelier crystals glint and sway", "guests walk up the staircase"], ["the chandelier"]),
    ("A laundromat at night with rows of washing machines, one of them running.", "interior",
     ["the running machine churns suds", "the fluorescent lights buzz and flicker"], []),
    ("A plant-filled living room with a green velvet sofa and a record player.", "interior",
     ["the record spins", "the plant leaves sway in a draft"], ["the record player"]),
    ("An old library reading room with long tables and green brass lamps.", "interior",
     ["the lamps glow warmer", "a page turns by itself"], ["the brass lamps"]),
    ("A ramen shop counter with empty stools and a steaming pot behind it.", "interior",
     ["steam rises from the pot", "the noren curtain at the door sways"], ["the stools"]),
    ("A bathroom with a clawfoot tub under a skylight.", "interior",
     ["light ripples through the skylight", "steam rises from the bath"], ["the clawfoot tub"]),
]
OUTDOOR_KINDS = ("landscape", "city")
PRODUCTS = [  # (caption phrase, noun)
    ("a matte white ceramic coffee mug", "mug"), ("a brushed steel water bottle", "bottle"),
    ("a pair of white wireless earbuds in an open charging case", "earbuds"),
    ("a green glass perfume bottle with a wooden cap", "perfume bottle"), ("a tan leather wallet", "wallet"),
    ("a compact mechanical keyboard with red keycaps", "keyboard"), ("a canvas sneaker in pale blue", "sneaker"),
    ("a round analog wristwatch with a leather strap", "watch"),
    ("a small Bluetooth speaker wrapped in fabric", "speaker"),
    ("an amber bottle of beard oil", "bottle"), ("a retro film camera", "camera"),
    ("a jar of whipped body butter with a gold lid", "jar"), ("a pair of black running shorts folded neatly", "shorts"),
    ("a cordless electric toothbrush", "toothbrush"), ("a stainless steel chef's pan", "pan"),
    ("a glass tumbler of iced tea", "glass"), ("a kraft paper box of loose-leaf tea", "box"),
    ("a matte black fountain pen", "pen"), ("a smartwatch with a silicone band", "smartwatch"),
    ("a can of sparkling grapefruit water", "can"), ("a woven rattan handbag", "handbag"),
    ("a tube of hand cream", "tube"), ("a ceramic plant pot with a small succulent", "pot"),
    ("a portable power bank", "power bank"), ("a pair of gold-rimmed reading glasses", "glasses"),
    ("a soy candle in a frosted glass jar", "candle"), ("a vinyl record in a plain sleeve", "record"),
    ("a wooden chess set box", "box"), ("a folding pocket knife with a wooden handle", "knife"),
    ("a bottle of cold brew coffee", "bottle"),
]
SURFACES = [
    "on a white seamless background", "on a marble countertop", "on a light oak desk", "on a concrete pedestal",
    "on a pastel pink backdrop", "on a slab of dark slate", "on a linen tablecloth", "on a mirrored tray",
    "on a round stool against a beige wall", "on a glass shelf", "on a terracotta tile floor",
    "on a bed of dried leaves",
]
PRODUCT_EXTRAS = [
    "The lighting is soft and even.", "A soft shadow falls to the right.", "There is nothing else in the frame.",
    "A small plant is out of focus behind it.", "It is photographed from a slight high angle.", "",
    "The shot is centered with empty space around it.",
]
VEHICLES = [
    ("a cherry-red 1960s convertible", "car"), ("a rusty blue pickup truck", "truck"),
    ("a white camper van with a surfboard on the roof", "van"), ("a black motorcycle with chrome pipes", "motorcycle"),
    ("a yellow school bus", "bus"), ("a matte gray electric SUV", "SUV"),
    ("a small vintage hatchback in mint green", "car"),
    ("an orange food truck with its hatch closed", "food truck"),
    ("a boxy old station wagon with wood paneling", "station wagon"),
    ("a bright green tractor", "tractor"),
]
VEHICLE_PLACES = [
    "parked on a coastal road", "parked in front of a roadside diner", "on a gravel driveway beside a barn",
    "in an empty parking garage", "on the shoulder of a desert highway", "on a leafy suburban street",
    "outside a mountain lodge", "in a puddle-covered lot after rain",
]
FOODS = [  # (caption phrase, noun, motions)
    ("a steaming bowl of pho with herbs on the side", "pho", ["steam curls up from the broth", "chopsticks lift a tangle of noodles"]),
    ("a slice of cherry pie with a scoop of melting vanilla ice cream", "pie", ["the ice cream slowly melts down the crust", "a fork cuts into the slice"]),
    ("a stack of waffles topped with berries and cream", "waffles", ["syrup pours over the top", "a berry rolls off the stack"]),
    ("a wood-fired margherita pizza", "pizza", ["a slice is pulled away with stretchy cheese", "the basil leaves wilt in the heat"]),
    ("a glass of iced coffee with milk", "iced coffee", ["the milk swirls into the coffee", "the ice cubes shift and clink"]),
    ("a plate of pan-fried dumplings with dipping sauce", "dumplings", ["one dumpling is dipped into the sauce", "steam rises from the plate"]),
    ("a cheeseburger with melted cheese on a brioche bun", "burger", ["the cheese drips down the side", "a hand lifts the burger"]),
    ("a cheese board with grapes, figs and crackers", "cheese board", ["a hand takes a grape", "a knife slices the soft cheese"]),
    ("a tall glass of mango lassi with a paper straw", "lassi", ["the straw stirs the drink", "condensation runs down the glass"]),
    ("a bowl of tomato soup with a grilled cheese sandwich", "soup", ["the sandwich dips into the soup", "steam drifts off the bowl"]),
]
FOOD_SURFACES = [
    "on a rustic wooden table", "on a white marble counter", "on a red checkered tablecloth", "on a dark slate board",
    "at a sunny cafe table", "on a kitchen windowsill",
]
ARTWORKS = [  # (caption, noun, actions)
    ("A watercolor illustration of a hedgehog in a red scarf carrying a lantern along a snowy path.", "hedgehog",
     ["raise the lantern", "trudge forward through the snow", "sniff the air and smile"]),
    ("An oil painting of a young shepherdess resting under an olive tree.", "shepherdess",
     ["look up from under the tree", "stretch and stand up", "brush a strand of hair aside"]),
    ("A pixel art scene of a wizard standing on a cliff facing a purple sky.", "wizard",
     ["raise his staff and cast sparks", "let his cloak billow", "turn toward the viewer"]),
    ("A 3D render of a chubby orange robot holding a watering can in a garden.", "robot",
     ["water the flowers", "wave its free hand", "wobble and tip the can"]),
    ("A cartoon drawing of a grumpy cactus wearing a cowboy hat.", "cactus",
     ["tip its hat", "roll its eyes", "hop across the sand"]),
    ("A charcoal sketch of an old jazz saxophonist with his eyes closed.", "saxophonist",
     ["play a slow phrase, swaying", "open his eyes and smile", "lower the saxophone"]),
    ("An anime-style drawing of a girl with a sword sitting on a rooftop at night.", "girl",
     ["stand up and draw the sword", "look down at the city", "let her hair blow in the wind"]),
    ("A storybook illustration of a bear in pajamas reading by candlelight.", "bear",
     ["turn a page", "yawn and blow out the candle", "look up and smile"]),
    ("A digital painting of a dragon curled around a ruined tower.", "dragon",
     ["lift its head and exhale smoke", "unfurl its wings", "tighten its coils around the tower"]),
    ("A retro travel poster illustration of a sailboat near white cliffs.", "sailboat",
     ["glide along the water", "let its sails fill with wind"]),
    ("A claymation-style render of a snail wearing a tiny backpack.", "snail",
     ["inch forward", "poke its eye stalks around", "look back at the backpack"]),
    ("A linocut print of a heron taking flight above reeds.", "heron",
     ["flap its wings and rise", "glide out of frame"]),
]

COLORS = [
    "cobalt blue", "forest green", "burnt orange", "pastel lilac", "matte black", "cream", "cherry red",
    "mustard yellow",
    "teal", "dusty pink", "charcoal gray", "olive", "navy", "sand beige", "emerald", "lavender", "rust red",
    "pale mint",
]
ART_STYLES = [
    "a watercolor painting", "a hand-painted anime film still", "16-bit pixel art",
    "an oil painting with thick brushstrokes",
    "a pencil sketch", "a 1970s film photo", "claymation", "low poly 3D", "a ukiyo-e woodblock print",
    "pop art with bold flat colors", "a charcoal drawing", "a stained glass window", "cyberpunk neon art",
    "a vintage postcard", "coloring book line art", "a children's book illustration", "a blueprint drawing",
    "an embroidery pattern", "paper cut craft", "an impressionist painting", "an Art Deco poster", "a risograph print",
    "a marble statue", "a Renaissance fresco", "a vaporwave collage", "a chalk drawing on a sidewalk",
    "a 3D toy figurine render", "a Bauhaus-style poster", "a tarot card illustration", "a faded polaroid",
]
WEATHER_EDITS = [
    "make it winter", "make it night", "add heavy rain", "make it a foggy morning", "make it sunset",
    "make it autumn", "add a rainbow after rain", "add a snowstorm", "make it cherry blossom season",
    "make it just after a storm with puddles everywhere", "make it look like a scorching summer noon",
    "make it overcast and moody", "make it twilight with lights coming on", "add a light dusting of first frost",
    "make it misty dawn", "make the sky a dramatic thunderstorm", "make it a clear starry night",
    "make it spring with everything in bloom", "make it a hazy heatwave afternoon", "add a full moon rising",
    "make it look like late golden afternoon", "turn the sky into a pink and orange sunrise",
]
WEATHER_KEYWORDS = [
    "winter", "night time", "heavy snow", "thick fog", "sunset", "rainy night", "autumn colors", "golden hour please",
    "midnight", "stormy", "dawn", "summer", "spring bloom", "overcast", "moonlight", "first snow",
]
GENERAL_BACKGROUNDS = [  # (bare, with preposition)
    ("a snowy mountain pass", "on a snowy mountain pass"),
    ("a Tokyo side street at night", "in a Tokyo side street at night"),
    ("a plain white studio backdrop", "in a plain white studio"), ("a sunflower field", "in a sunflower field"),
    ("a cozy library", "in a cozy library"), ("a tropical beach at sunset", "on a tropical beach at sunset"),
    ("a rooftop bar with city lights", "at a rooftop bar with city lights"),
    ("the surface of Mars", "on the surface of Mars"),
    ("an underwater coral reef", "underwater next to a coral reef"),
    ("a soft beige gradient", "against a soft beige gradient"),
    ("a busy farmers market", "at a busy farmers market"),
    ("a medieval castle courtyard", "in a medieval castle courtyard"),
    ("a lavender field in Provence", "in a lavender field in Provence"),
    ("a foggy pine forest", "in a foggy pine forest"),
    ("a neon-lit arcade", "in a neon-lit arcade"), ("a Parisian balcony", "on a Parisian balcony"),
    ("a desert at golden hour", "in the desert at golden hour"), ("a bamboo forest", "in a bamboo forest"),
    ("a cherry blossom park", "in a park full of cherry blossoms"), ("a retro 80s diner", "in a retro 80s diner"),
    ("a spaceship cockpit", "inside a spaceship cockpit"), ("a red carpet event", "at a red carpet event"),
    ("the deck of a sailboat", "on the deck of a sailboat"), ("a misty Scottish glen", "in a misty Scottish glen"),
]
PRODUCT_BACKGROUNDS = [
    ("a marble bathroom counter", "on a marble bathroom counter"), ("a pastel gradient", "against a pastel gradient"),
    ("moss and river stones", "on a bed of moss and river stones"),
    ("a sunlit kitchen windowsill", "on a sunlit kitchen windowsill"),
    ("a splash of water on a blue backdrop", "in a splash of water on a blue backdrop"),
    ("black velvet", "on black velvet"),
    ("a rustic picnic table in a meadow", "on a rustic picnic table in a meadow"),
    ("a sleek dark studio with a spotlight", "in a sleek dark studio under a spotlight"),
    ("a beach towel on the sand", "on a beach towel on the sand"),
    ("a snowy log in a forest", "on a snowy log in a forest"),
    ("a desk in a bright minimalist office", "on a desk in a bright minimalist office"),
    ("stacked travertine blocks", "on stacked travertine blocks"),
    ("a pile of coffee beans", "on a pile of coffee beans"),
]
PERSON_ACCESSORIES = [
    "round sunglasses", "a wide-brimmed hat", "a chunky knit scarf", "a pair of headphones", "a bouquet of wildflowers",
    "a red beret", "a silver necklace", "a backpack", "a takeaway coffee cup", "a pair of wire-rimmed glasses",
    "a leather messenger bag", "a bright umbrella",
]
EXPRESSIONS = ["smile", "laugh", "look surprised", "look serious", "look sleepy", "smirk", "look thoughtful"]
HAIR = [
    "platinum blonde", "bright red", "a short bob", "long and wavy", "silver gray", "teal", "shaved on the sides",
    "in a messy bun", "braided",
]
SCENE_ADDITIONS = {
    "landscape": ["a small wooden cabin", "a hot air balloon in the sky", "a deer at the edge of the frame",
                  "a winding stone path", "a lone hiker", "a flock of birds", "a red tent", "a rainbow"],
    "city": ["a food truck", "string lights across the street", "a street musician", "a cyclist passing by",
             "a flower stall", "a vintage car parked at the curb", "a couple walking a dog", "bunting flags"],
    "interior": ["a big fiddle leaf fig", "a reading lamp", "a sleeping cat", "a patterned rug", "framed photos on the wall",
                 "a stack of vinyl records", "fairy lights", "a vase of sunflowers"],
}
REPLACEMENTS = [
    "a fountain", "a big old tree", "a stack of crates", "a vintage bicycle", "a bench", "a flower bed", "a sculpture",
    "a market stall", "a pile of pumpkins",
]
PRODUCT_PROPS = [
    "a sprig of eucalyptus", "a few coffee beans", "a folded linen napkin", "a slice of lemon",
    "some scattered rose petals",
    "a pair of sunglasses", "a small stack of books", "a ceramic dish", "some ice cubes", "a sprig of lavender",
]
BRANDS = [
    "MOSSWELL", "Kettle & Finch", "NORTHBAY", "luma", "Okapi Coffee", "ROAM", "Fennel", "Saltmarsh", "PARALLAX",
    "Little Orbit", "BRISK", "Hollow Pine",
]


# --------------------------------------------------------------------------------------------------------------
# text-to-video
# --------------------------------------------------------------------------------------------------------------

def an(word: str) -> str:
    return ("an " if word[:1].lower() in "aeiou" else "a ") + word


def core_and_setting(g: Gen, moving: bool | None = None) -> tuple[str, str, bool]:
    moving = g.chance(0.5) if moving is None else moving
    core, group = g.pick(MOVING_CORES if moving else STATIC_CORES)
    return core, g.pick(SETTINGS[group]), moving


def t2v_cinematic(g: Gen) -> str:
    core, setting, moving = core_and_setting(g)
    shot = g.pick(SHOTS_MOVING if moving else SHOTS_STATIC)
    light, lens, move = g.pick(LIGHTING), g.pick(LENSES), g.pick(CAMERA_MOVES)
    form = g.form("t2v_cinematic", 7)
    if form == 0:
        text = f"{shot} {core} {setting}, {light}, {lens}."
    elif form == 1:
        text = f"{shot} {core} {setting}, {lens}, {g.pick(ASPECTS)}"
    elif form == 2:
        text = f"Open on a {shot} {core} {setting}. {cap(g.pick(EXTRA_DETAILS))} in the background. {lens}, {g.pick(DURATIONS)}."
    elif form == 3:
        text = f"{shot} {core} {setting}. {cap(light)}, {g.pick(MOODS)}, {g.pick(DURATIONS)}."
    elif form == 4:
        text = f"cinematic {shot} {core} {setting} -- {g.pick(MOVES_ONLY)}, {light}"
    elif form == 5:
        text = f"{shot} {core} {setting}. Hold on the moment, then {g.pick(MOVES_ONLY)}. {lens}."
    else:
        text = f"Film still come to life: {shot} {core} {setting}, {g.pick(VIDEO_STYLES)}, {light}."
    return g.case(tidy(text))


def t2v_character(g: Gen) -> str:
    core, setting, _ = core_and_setting(g)
    light, move, mood, style = g.pick(LIGHTING), g.pick(CAMERA_MOVES), g.pick(MOODS), g.pick(VIDEO_STYLES)
    form = g.form("t2v_character", 8)
    if form == 0:
        text = f"{core} {setting}. {cap(move)}, {light}. {cap(mood)}, {g.pick(DURATIONS)}."
    elif form == 1:
        text = f"Can you make a {g.pick(DURATIONS)} clip of {core} {setting}? {cap(move)}, {light}."
    elif form == 2:
        text = f"{core} {setting}, {style}, {move}, {g.pick(DURATIONS)}"
    elif form == 3:
        text = f"Video: {core} {setting}. Camera: {move.removeprefix('camera ')}. {cap(style)}."
    elif form == 4:
        text = f"i want {an(mood)} shot of {core} {setting} with {light}"
    elif form == 5:
        text = f"{style} clip: {core} {setting}, {move}, {g.pick(ASPECTS)}."
    elif form == 6:
        text = f"{core} {setting} - {move}, {light}, {mood} mood"
    else:
        text = f"Make a short video of {core} {setting}. {cap(g.pick(EXTRA_DETAILS))} nearby. Keep it {mood}."
    return g.case(tidy(text))


def t2v_whimsical(g: Gen) -> str:
    whim, style, mood = g.pick(WHIMSICAL), g.pick(VIDEO_STYLES), g.pick(MOODS)
    form = g.form("t2v_whimsical", 6)
    if form == 0:
        text = f"{whim}, {style}, {g.pick(DURATIONS)}"
    elif form == 1:
        text = f"make a short video of {whim}. {style}, {mood}."
    elif form == 2:
        text = f"{style} animation of {whim}, {g.pick(CAMERA_MOVES)}"
    elif form == 3:
        text = f"For a kids' show intro: {whim}. Bright, {mood}, {g.pick(ASPECTS)}."
    elif form == 4:
        text = f"{whim} lol. make it look {style}"
    else:
        text = f"Could you animate {whim}? Something {mood}, around {g.pick(DURATIONS)}, {g.pick(LIGHTING)}."
    return g.case(tidy(text))


DOC_FEELS = [
    "a big-budget wildlife series", "a quiet nature film", "a science museum video", "an 80s educational film",
    "an IMAX nature documentary", "a calm screensaver", "a field researcher's footage",
]


def t2v_nature(g: Gen) -> str:
    core = g.pick(NATURE_CORES)
    mod, mod2 = g.sample(NATURE_MODS, 2)
    form = g.form("t2v_nature", 7)
    if form == 0:
        text = f"{core}, {mod}, {mod2}"
    elif form == 1:
        text = f"{core}. {cap(mod)}, {g.pick(DURATIONS)}."
    elif form == 2:
        text = f"nature documentary shot: {core}, {mod}"
    elif form == 3:
        text = f"Can you make a clip of {core}? It should feel like {g.pick(DOC_FEELS)}."
    elif form == 4:
        text = f"I'd like {mod} footage of {core}, {g.pick(LIGHTING)}"
    elif form == 5:
        text = f"{core} - {mod}, {g.pick(ASPECTS)}"
    else:
        text = f"wildlife clip: {core}. {cap(g.pick(CAMERA_MOVES))}. No people, only nature."
    return g.case(tidy(text))


TERSE_SUBJECTS = [
    "lone samurai", "vintage tram", "koi fish", "neon diner", "giant tortoise", "paper airplane", "origami crane",
    "street drummer", "crystal cave", "clockwork owl", "abandoned carousel", "red balloon", "floating islands",
    "glass whale", "desert nomad", "rooftop garden", "ghost ship", "bullet train", "ice hotel", "mechanical spider",
    "lantern festival", "old windmill", "cyborg monk", "snow monkeys", "moth swarm", "runaway kite", "snow globe city",
    "retro robot", "night ferry", "fox spirit", "treehouse village", "burning piano", "space whale", "tea ceremony",
    "neon koi", "rusted mech", "hot air balloons", "flooded cathedral", "jellyfish sky", "mirror maze",
]
TERSE_PLACES = [
    "tokyo alley", "mars colony", "arctic station", "bazaar", "sunken temple", "highland loch", "subway tunnel",
    "mangrove swamp", "canyon", "rice paddies", "salt mine", "suburbia", "rainforest", "harbor", "ski slope",
    "ancient ruins", "lava field", "orchard", "rooftops", "floating market", "moon base", "cloud city",
]
TERSE_TIMES = [
    "dusk", "3am", "foggy dawn", "midsummer", "heavy snow", "after rain", "golden hour", "midnight", "noon",
    "stormy night", "eclipse", "twilight", "first light", "monsoon",
]
TERSE_STYLES = [
    "cinematic", "anime", "claymation", "noir", "dreamy", "8mm film", "retro", "surreal", "hyperreal", "moody",
    "pastel", "epic", "cozy", "painterly", "vaporwave", "gothic", "minimalist", "synthwave", "ink wash",
]
TERSE_CAMERAS = [
    "slow pan", "dolly in", "orbit", "aerial", "handheld", "macro", "timelapse", "tracking shot", "drone shot",
    "crane up", "pov", "static cam", "zoom out", "top down", "fpv drone", "whip pan",
]
TERSE_FORMATS = ["4k", "9:16", "16:9", "loop", "slow mo", "60fps", "film grain", "8s", "5 sec", "hdr", "24fps", "seamless loop"]


def terse(g: Gen, parts: list[list[str]], subjects: list[str]) -> str:
    pieces = [g.pick(subjects)] + [g.pick(p) for p in g.sample(parts, g.randint(2, min(5, len(parts))))]
    if g.chance(0.2):
        pieces.insert(1, g.pick(subjects))
    sep = g.pick([", ", ", ", ", ", " | ", " + ", ". "])
    text = sep.join(pieces)
    return text.lower() if g.chance(0.8) else cap(text)


def t2v_terse(g: Gen) -> str:
    return terse(g, [TERSE_PLACES, TERSE_TIMES, TERSE_STYLES, TERSE_CAMERAS, TERSE_FORMATS], TERSE_SUBJECTS)


RAMBLE_OPENERS = [
    "ok so", "so basically", "Hi! I have an idea for a short video.", "hmm okay,", "This might be weird but",
    "I'm making a short film for school and", "For my cousin's bakery page,", "Alright, here's what I'm picturing:",
    "so my friend and I had this idea,", "Okay bear with me here:", "I need a clip for a presentation,",
    "I've been thinking about this scene for weeks:", "Not sure how to phrase this, but",
    "quick one (maybe not quick lol):",
    "So I'm putting together a little trailer for my D&D group and", "I teach third grade and I want a fun clip where",
]
RAMBLE_SCENE = ["there's {core} {setting}", "picture {core} {setting}", "I want {core} {setting}",
                "the idea is {core} {setting}", "imagine {core} {setting}"]
RAMBLE_MIDDLE = [
    "The light should be {light}, kind of {mood}.", "Maybe the camera starts far away and then it's a {move}?",
    "No dialogue obviously, just the feeling of it.", "I don't want it too polished, more {style}.",
    "Actually scratch that, make it {time} instead.", "There could be {detail} in the background but not distracting.",
    "It's for {purpose} so it should feel {mood}.", "Length wise maybe {duration}?",
    "Aspect ratio {aspect} if that matters.",
    "I keep picturing {light}, you know?", "It doesn't have to be realistic, {style2} is fine too.",
    "The important part is the ending, where everything slows down.", "Like the moment right before something happens.",
    "Please don't make it cheesy.", "Think of how an old memory feels, a bit blurry at the edges.",
]
RAMBLE_CLOSERS = [
    "does that make sense?", "thanks!!", "Hope that's enough to go on.", "Not sure if that's too much.", "",
    "you can fill in the rest.", "Let me know if you need more detail, but I trust you.", "ty", "",
]
PURPOSES = ["my grandma's 80th birthday", "a product launch", "our band's new single", "a wedding video",
            "a school project", "my cooking channel", "a charity fundraiser", "an Instagram reel"]
TIMES_OF_DAY = ["early morning", "late at night", "sunset", "a rainy afternoon", "the middle of winter", "high noon", "dawn"]


def t2v_rambling(g: Gen) -> str:
    core, setting, _ = core_and_setting(g)
    if g.chance(0.2):
        core, setting = g.pick(WHIMSICAL), ""
    style, style2 = g.sample(VIDEO_STYLES, 2)
    slots = dict(light=g.pick(LIGHTING), mood=g.pick(MOODS), move=g.pick(CAMERA_MOVES), style=style, style2=style2,
                 time=g.pick(TIMES_OF_DAY), detail=g.pick(EXTRA_DETAILS), purpose=g.pick(PURPOSES),
                 duration=g.pick(DURATIONS), aspect=g.pick(ASPECTS))
    scene = g.pick(RAMBLE_SCENE).format(core=core, setting=setting)
    middle = " ".join(m.format(**slots) for m in g.sample(RAMBLE_MIDDLE, g.randint(2, 4)))
    text = f"{g.pick(RAMBLE_OPENERS)} {scene}. {middle} {g.pick(RAMBLE_CLOSERS)}"
    return tidy(text)


# --------------------------------------------------------------------------------------------------------------
# image scenes (captions) for image-to-video and image-to-image
# --------------------------------------------------------------------------------------------------------------

PRONOUNS = {"he": ("he", "him", "his"), "she": ("she", "her", "her")}


def person_scene(g: Gen) -> dict:
    desc, noun, pn, cloth = g.pick(PEOPLE)
    place = g.pick(PERSON_PLACES)
    extra = g.pick(PERSON_EXTRAS).format(P=cap(pn))
    caption = tidy(f"{cap(desc)} {place}. {extra}")
    subj, obj, pos = PRONOUNS[pn]
    outdoor = not any(w in place for w in ("kitchen", "subway", "desk", "sofa", "rug", "bookshelf", "train", "greenhouse"))
    return dict(kind="person", caption=caption, noun=noun, pn=subj, obj=obj, pos=pos, cloth=cloth, outdoor=outdoor)


def animal_scene(g: Gen) -> dict:
    caption, noun, actions = g.pick(ANIMALS)
    return dict(kind="animal", caption=caption, noun=noun, actions=actions, outdoor=False)


def product_scene(g: Gen) -> dict:
    desc, noun = g.pick(PRODUCTS)
    caption = tidy(f"{cap(desc)} {g.pick(SURFACES)}. {g.pick(PRODUCT_EXTRAS)}")
    return dict(kind="product", caption=caption, noun=noun, outdoor=False)


def place_scene(g: Gen) -> dict:
    caption, kind, motions, items = g.pick(SCENES)
    return dict(kind=kind, caption=caption, motions=motions, items=items, noun="scene", outdoor=kind in OUTDOOR_KINDS)


def vehicle_scene(g: Gen) -> dict:
    desc, noun = g.pick(VEHICLES)
    place = g.pick(VEHICLE_PLACES)
    extra = g.pick(["", "", "Nobody is around.", "The photo is taken from the front at an angle.", "It is a clear day."])
    caption = tidy(f"{cap(desc)} {place}. {extra}")
    return dict(kind="vehicle", caption=caption, noun=noun, outdoor="garage" not in place)


def food_scene(g: Gen) -> dict:
    desc, noun, motions = g.pick(FOODS)
    caption = tidy(f"{cap(desc)} {g.pick(FOOD_SURFACES)}.")
    return dict(kind="food", caption=caption, noun=noun, motions=motions, outdoor=False)


def art_scene(g: Gen) -> dict:
    caption, noun, actions = g.pick(ARTWORKS)
    return dict(kind="art", caption=caption, noun=noun, actions=actions, outdoor=False)


SCENE_MAKERS: list[tuple[float, Callable[[Gen], dict]]] = [
    (0.28, person_scene), (0.17, animal_scene), (0.17, product_scene), (0.22, place_scene),
    (0.05, vehicle_scene), (0.05, food_scene), (0.06, art_scene),
]


def weighted(g: Gen, options: list[tuple[float, Callable]]):
    total = sum(w for w, _ in options)
    roll = g.r.random() * total
    for weight, item in options:
        roll -= weight
        if roll <= 0:
            return item
    return options[-1][1]


# --------------------------------------------------------------------------------------------------------------
# image-to-video
# --------------------------------------------------------------------------------------------------------------

I2V_SUFFIXES = [
    "", "", "", "subtle", "slow and smooth", "natural motion", "no camera movement",
    "loop it", "realistic", "{duration}", "{aspect}", "{duration}, {aspect}", "cinematic", "gentle, nothing dramatic",
]
PERSON_SUFFIXES = ["keep the face the same", "don't change {pos} face", "keep {pos} outfit identical"]
GENERIC_CAMERA = [
    "slow push in", "slow pull back to reveal more of the surroundings", "orbit around the {n}",
    "pan from left to right",
    "tilt up slowly", "dolly forward", "drone rise straight up",
    "handheld, slight sway like someone filming on a phone",
    "gentle parallax, foreground moving faster than background", "zoom in slowly toward the {n}",
    "arc around to the right", "rack focus from the background to the {n}",
]
PRODUCT_SHOTS = [
    "360 turntable spin", "slow rotation to show the back", "light sweep across the surface",
    "slow orbit with a soft reflection on the floor", "slow tilt down from above", "macro glide along the edges",
    "dramatic reveal from darkness", "slow push in",
]
PRODUCT_EVENTS = [
    "it floats up and slowly rotates", "water droplets fall around it in slow motion",
    "flower petals drift down around it",
    "smoke swirls around the base", "the camera pushes in until the label area fills the frame",
    "a spotlight clicks on and reveals it", "leaf shadows move across it", "a hand reaches in and picks it up",
    "confetti falls around it", "ripples spread across the surface underneath it",
]
PRODUCT_VERBS = ["spin slowly", "rise and hover", "rotate a quarter turn to face the camera", "tilt toward the light",
                 "bounce gently like it just landed", "slide into frame from the right"]
VEHICLE_ACTIONS = [
    "drive off slowly toward the horizon", "flick its headlights on", "pull away with a bit of dust kicking up",
    "start up with a slight shake of the engine", "roll forward a few meters and stop",
]


def suffix(g: Gen, s: dict) -> str:
    if s["kind"] == "person" and g.chance(0.2):
        return g.pick(PERSON_SUFFIXES).format(pos=s["pos"])
    return g.pick(I2V_SUFFIXES).format(duration=g.pick(DURATIONS), aspect=g.pick(ASPECTS))


def join_suffix(text: str, extra: str) -> str:
    camera_words = ("orbit", "push", "pan", "dolly", "tilt", "zoom", "drone", "camera", "crane", "arc ", "rack", "spin", "rotat")
    if not extra or (extra == "no camera movement" and any(w in text.lower() for w in camera_words)):
        return text
    if text.endswith("?"):
        return f"{text[:-1]}, {extra}?"
    return f"{text}, {extra}"


def i2v_request(g: Gen, s: dict) -> str:
    kind, n = s["kind"], s["noun"]
    if g.chance(0.15):
        text = g.pick(GENERIC_CAMERA).format(n=n if kind not in ("landscape", "city", "interior") else "center")
        return g.case(tidy(join_suffix(text, suffix(g, s))))
    if kind == "person":
        act = g.pick(PERSON_ACTIONS).format(pos=s["pos"], pn=s["pn"], cloth=s["cloth"])
        obj, pos, pn = s["obj"], s["pos"], s["pn"]
        form = g.form("i2v_request", 9)
        text = [
            f"make the {n} {act}", f"have {obj} {act}", f"{pn} should {act}", f"let {obj} {act}",
            f"Animate {obj}: {act}, {g.pick(['slowly', 'naturally', 'quick', 'subtle'])}", f"can the {n} {act}?",
            f"I want the {n} to {act}", f"cinemagraph: only {pos} {s['cloth']} and hair move in the wind",
            f"slow push in on {pos} face while {pn} {g.pick(['blinks', 'breathes slowly', 'smiles a little'])}",
        ][form]
    elif kind in ("animal", "art"):
        act = g.pick(s["actions"])
        then = g.pick([a for a in s["actions"] if a != act])
        text = g.pick([
            f"make the {n} {act}", f"the {n} should {act}", f"can the {n} {act}", f"have the {n} {act}",
            f"bring it to life, the {n} should {act}", f"make the {n} {act} and then {then}",
            f"I'd love it if the {n} could {act}",
        ])
    elif kind == "product":
        text = g.pick([
            f"{g.pick(PRODUCT_SHOTS)} for the {n}", f"make the {n} {g.pick(PRODUCT_VERBS)}",
            f"product video: {g.pick(PRODUCT_SHOTS)}", f"{g.pick(PRODUCT_EVENTS)}, premium ad feel",
            f"make it look like a commercial, the {n} should {g.pick(PRODUCT_VERBS)}", g.pick(PRODUCT_EVENTS),
            f"make it so {g.pick(PRODUCT_EVENTS)}", f"{g.pick(PRODUCT_SHOTS)} while {g.pick(PRODUCT_EVENTS)}",
        ])
    elif kind == "vehicle":
        text = g.pick([f"make the {n} {g.pick(VEHICLE_ACTIONS)}", f"orbit around the {n}, {g.pick(LIGHTING)}",
                       f"the {n} should {g.pick(VEHICLE_ACTIONS)}", f"rain starts falling and beads on the {n}"])
    else:  # landscape, city, interior, food
        a = g.pick(s["motions"])
        others = [m for m in s["motions"] if m != a]
        b = g.pick(others) if others else a
        text = g.pick([
            a, f"make it so {a}", f"{a}, keep everything else still", f"{a} and {b}" if b != a else a,
            f"animate it: {a}, {g.pick(CAMERA_MOVES)}", f"just {a}, subtle", f"bring the photo to life, {a}",
            f"{g.pick(['slow push in', 'slow pan right', 'gentle drone rise'])} while {a}",
        ])
    return g.case(tidy(join_suffix(text, suffix(g, s))))


def i2v_row(g: Gen) -> tuple[str, str]:
    s = weighted(g, SCENE_MAKERS)(g)
    return i2v_request(g, s), s["caption"]


# --------------------------------------------------------------------------------------------------------------
# image-to-image
# --------------------------------------------------------------------------------------------------------------

def i2i_style(g: Gen, s: dict) -> str:
    style = g.pick(ART_STYLES)
    subject = "composition" if s["noun"] == "scene" else s["noun"]
    keep = g.pick([subject, "composition", "layout"] + (["pose"] if s["kind"] in ("person", "animal") else []))
    return g.pick([
        f"{style}", f"turn this into {style}", f"make it {style} but keep the {keep}", f"restyle as {style}, same framing",
        f"{style} please", f"make this look like {style}. keep the {subject} recognizable", f"can you redo it as {style}?",
        f"convert to {style}", f"style: {style}",
    ])


def i2i_weather(g: Gen, s: dict) -> str:
    edit = g.pick(WEATHER_EDITS)
    keep = s["noun"] if s["noun"] != "scene" else g.pick(["buildings", "layout", "composition", "framing"])
    return g.pick([
        edit, f"{edit}, keep the {keep} the same", f"{edit} but don't change anything else", f"can you {edit}?",
        g.pick(WEATHER_KEYWORDS), f"{edit}. {g.pick(['realistic', 'moody', 'cozy vibe', 'for a postcard', '16:9'])}",
        f"same photo but {edit.removeprefix('make it ')}" if edit.startswith("make it ") else edit,
    ])


def i2i_background(g: Gen, s: dict) -> str:
    pool = PRODUCT_BACKGROUNDS if s["kind"] in ("product", "food") else GENERAL_BACKGROUNDS
    (bg, where), n = g.pick(pool), s["noun"]
    return g.pick([
        f"replace the background with {bg}", f"put the {n} {where}", f"new background: {bg}",
        f"swap the background for {bg}, keep the {n} exactly the same", f"bg -> {bg}",
        f"change the background to {bg} and match the lighting", f"put it {where}",
        f"can you make it look like the {n} is {where}?", f"I want the {n} {where} instead",
    ])


def i2i_objects(g: Gen, s: dict) -> str:
    kind, n = s["kind"], s["noun"]
    if kind == "person":
        obj, pos = s["obj"], s["pos"]
        return g.pick([
            f"change {pos} {s['cloth']} to {g.pick(COLORS)}", f"give {obj} {g.pick(PERSON_ACCESSORIES)}",
            f"make {obj} {g.pick(EXPRESSIONS)}", f"make {pos} hair {g.pick(HAIR)}",
            f"make {obj} look about 20 years older", f"make the {n} look younger, like early twenties",
            f"remove the {n} completely and fill in the background", f"add a golden retriever sitting next to {obj}",
            f"{s['cloth']} -> {g.pick(COLORS)}", f"change {pos} {s['cloth']} to {g.pick(COLORS)} and give {obj} {g.pick(PERSON_ACCESSORIES)}",
        ])
    if kind in ("animal", "art"):
        return g.pick([
            f"put {g.pick(ANIMAL_ACCESSORIES)} on the {n}", f"give the {n} {g.pick(ANIMAL_ACCESSORIES)}",
            f"add a second {n} next to it", f"remove the {n} and fill in the background naturally",
            f"make the {n} {g.pick(['twice as big', 'tiny', 'look like a plush toy', 'glow faintly', 'made of gold'])}",
        ])
    if kind == "product":
        brand = g.pick(BRANDS)
        return g.pick([
            f"make the {n} {g.pick(COLORS)}", f"add {g.pick(PRODUCT_PROPS)} next to the {n}",
            f"put a small logo on the {n} that says {brand}", f"add the text \"{brand}\" in a clean sans serif on the {n}",
            f"add water droplets on the {n} like it's cold", f"change the {n} color to {g.pick(COLORS)} and add {g.pick(PRODUCT_PROPS)}",
            f"make the {n} look {g.pick(['brushed copper', 'frosted glass', 'matte ceramic', 'walnut wood', 'glossy plastic'])}",
        ])
    if kind == "vehicle":
        return g.pick([
            f"recolor the {n} {g.pick(COLORS)}", f"make the {n} look old and rusty", f"make the {n} look brand new and shiny",
            f"add a roof rack with {g.pick(['two bikes', 'a kayak', 'camping gear', 'a surfboard'])}",
            f"remove the {n}", f"put racing stripes on the {n}",
        ])
    if kind == "food":
        return g.pick([
            f"add {g.pick(['fresh herbs', 'a sprinkle of chili flakes', 'a lemon wedge', 'more steam', 'a drizzle of honey'])}",
            f"make the {n} look more appetizing", f"swap the plate for {g.pick(['a blue ceramic bowl', 'a rustic clay dish', 'a white square plate'])}",
            f"add a hand reaching in to take some", "add a glass of water and a napkin next to it",
        ])
    additions = SCENE_ADDITIONS[kind]
    options = [f"add {g.pick(additions)}", f"add {g.pick(additions)} and {g.pick(additions)}",
               f"put {g.pick(additions)} somewhere in the frame"]
    if s["items"]:
        item = g.pick(s["items"])
        options += [f"remove {item}", f"replace {item} with {g.pick(REPLACEMENTS)}", f"get rid of {item} please",
                    f"remove {item} and add {g.pick(additions)}"]
    return g.pick(options)


def i2i_row(g: Gen) -> tuple[str, str]:
    s = weighted(g, SCENE_MAKERS)(g)
    ops: list[tuple[float, Callable]] = [(0.27, i2i_style), (0.33, i2i_objects)]
    if s["outdoor"]:
        ops.append((0.25, i2i_weather))
    if s["kind"] in ("person", "animal", "product", "vehicle", "food"):
        ops.append((0.25, i2i_background))
    request = weighted(g, ops)(g, s)
    if g.chance(0.12):
        request = f"{request}. {g.pick(['keep it photoreal', 'high detail', 'same resolution', 'subtle please', 'make it look natural', '4:5 crop'])}"
    return g.case(tidy(request), lower=0.5), s["caption"]


# --------------------------------------------------------------------------------------------------------------
# text-to-image
# --------------------------------------------------------------------------------------------------------------

T2I_PRODUCTS = [desc for desc, _ in PRODUCTS] + [
    "a bottle of small-batch hot honey", "a bamboo toothbrush set", "a linen tote bag",
    "a glass teapot with a blooming tea flower",
    "a pair of leather hiking boots", "a brass desk lamp", "a tube of mineral sunscreen", "a jar of chili crisp",
    "a tin of watercolor paints", "a gaming mouse with RGB lighting", "a stainless steel french press",
    "a leather-bound notebook", "a titanium smart ring", "a bar of dark chocolate in kraft wrapping",
    "a set of copper measuring cups", "a cork yoga block", "a mini espresso machine", "a pair of merino wool socks",
    "a ceramic ramen bowl set", "a cast iron skillet", "a kids' rain boot in bright yellow", "a silk pillowcase",
]
T2I_SURFACES = SURFACES + [
    "floating in mid-air", "on a bed of moss", "half-submerged in clear water", "on stacked travertine blocks",
    "on a sunlit windowsill", "surrounded by fresh ingredients", "on crumpled silk",
    "on a sand dune with a long shadow",
]
PRODUCT_LIGHTS = [
    "soft window light", "hard flash with crisp shadows", "backlit with a rim glow", "smooth gradient studio light",
    "dappled sunlight through leaves", "moody low-key light", "bright high-key lighting", "warm late-afternoon sun",
    "pink and blue colored gels", "a single softbox from above",
]
FRAMINGS = [
    "top-down flat lay", "three-quarter view", "eye-level hero angle", "macro detail shot",
    "centered with lots of negative space", "45 degree angle", "tight crop", "low angle so it looks monumental",
]
IMAGE_ASPECTS = ["1:1", "4:5", "2:3", "3:2", "16:9", "9:16", "square", "portrait", "landscape format", "3:1 banner"]


def t2i_product(g: Gen) -> str:
    p, surf, light, frame = g.pick(T2I_PRODUCTS), g.pick(T2I_SURFACES), g.pick(PRODUCT_LIGHTS), g.pick(FRAMINGS)
    text = g.pick([
        f"{p} {surf}, {light}, {frame}",
        f"Product shot of {p} {surf}. {cap(light)}, {frame}, {g.pick(IMAGE_ASPECTS)}.",
        f"e-commerce photo of {p}, clean white background, {frame}, {g.pick(['no props', 'soft shadow', 'sharp focus'])}",
        f"hero image for {p}, {g.pick(['luxurious', 'playful', 'minimal', 'earthy', 'techy'])} mood, {light}",
        f"I sell things online and need a listing photo of {p} {surf}. {cap(light)}, {frame}, nothing cluttered.",
        f"ad image: {p} with {g.pick(PRODUCT_PROPS)}, {light}, {g.pick(IMAGE_ASPECTS)}",
        f"catalog photo, {p}, {frame}, {light}",
        f"{p} {surf}, photographed like a magazine editorial, {light}",
    ])
    return g.case(tidy(text))


ANIME_CHARS = [
    "a girl with a long black ponytail in a sailor uniform", "a boy with messy orange hair and a bandage on his cheek",
    "a shy librarian with oversized glasses", "a fox spirit with nine glowing tails",
    "a tired office worker with a loose tie",
    "a cyborg swordswoman with a glowing arm", "a cheerful delivery girl on a broom",
    "an old ramen chef with a headband",
    "twin sisters in matching raincoats", "a knight in silver armor with a cat companion", "a student astronaut",
    "a forest guardian girl with branches for antlers", "a moody guitarist with a mohawk",
    "a sleepy girl in an oversized hoodie",
    "a gentle giant robot", "a young wizard apprentice", "a boy with a paper crane on his shoulder",
    "a retired pirate captain with a wooden leg", "a girl with pink twin buns", "a stoic ninja with a scarf",
]
ANIME_SCENES = [
    "waiting at a rural bus stop in summer", "eating takoyaki at a night festival", "on a rooftop watching fireworks",
    "riding a scooter along a coastal road", "reading under a cherry tree", "running through a rainy street",
    "fixing a radio in a cluttered workshop", "floating in a sky full of whales",
    "looking out a train window at rice fields",
    "practicing archery at a mountain shrine", "asleep on a classroom desk", "staring at a giant moon over the sea",
    "in a cozy kitchen making onigiri", "standing in a field of blue flowers", "in a neon alley holding an umbrella",
]
ANIME_TAGS = [
    "90s anime aesthetic", "soft cel shading", "watercolor background", "vibrant colors", "manga lineart",
    "light novel cover style", "lo-fi vibe", "pastel palette", "dramatic lighting", "key visual", "film grain",
    "detailed background", "thick outlines", "sparkles and bloom", "muted colors", "sunset palette",
]


def t2i_anime(g: Gen) -> str:
    c, sc = g.pick(ANIME_CHARS), g.pick(ANIME_SCENES)
    t1, t2 = g.sample(ANIME_TAGS, 2)
    text = g.pick([
        f"anime illustration of {c} {sc}, {t1}, {t2}", f"{c} {sc}, anime style, {t1}",
        f"Draw {c} {sc}. Anime style with {t1} and {t2}.", f"manga panel: {c} {sc}, {t1}",
        f"chibi version of {c} {sc}", f"can u make an anime pic of {c} {sc}? {t1}, {g.pick(IMAGE_ASPECTS)}",
        f"{g.pick(['90s anime', 'shoujo', 'sports anime', 'slice of life', 'isekai', 'mecha anime'])} key visual: {c} {sc}", f"Light novel cover art with {c} {sc}, leave space at the top for the title",
        f"anime wallpaper, {c} {sc}, {t1}, 9:16",
    ])
    return g.case(tidy(text))


PORTRAIT_SUBJECTS = [desc for desc, *_ in PEOPLE] + [
    "a retired boxer with a crooked nose", "a young ballet student with her hair in a tight bun",
    "a tattooed barber with a handlebar mustache", "a grandmother with laugh lines and a gold tooth",
    "a beekeeper holding her veil", "a jazz singer in a sequined dress", "a teenage chess prodigy",
    "a farmer with sunburnt cheeks", "a trans man in a crisp white shirt", "an astronaut with her helmet under her arm",
]
PORTRAIT_LIGHT = [
    "Rembrandt lighting", "soft window light", "split lighting", "golden hour backlight", "on-camera flash",
    "neon side light", "overcast daylight", "butterfly lighting", "candlelight",
]
PORTRAIT_BG = [
    "against a mottled gray backdrop", "in front of a full bookcase", "with a blurred city street behind",
    "against a deep green wall", "in a field of tall grass", "against a plain white wall", "in a dim workshop",
]
PORTRAIT_LENS = ["85mm f/1.4", "50mm", "medium format film", "shot on portrait film stock", "35mm film grain", "105mm"]
PORTRAIT_EXPR = ["laughing", "with a serious gaze", "looking away thoughtfully", "with a soft smile", "eyes closed",
                 "mid-sentence", "squinting into the sun"]


def t2i_portrait(g: Gen) -> str:
    who, light, bg, lens, expr = (g.pick(PORTRAIT_SUBJECTS), g.pick(PORTRAIT_LIGHT), g.pick(PORTRAIT_BG),
                                  g.pick(PORTRAIT_LENS), g.pick(PORTRAIT_EXPR))
    text = g.pick([
        f"portrait of {who}, {light}, {bg}, {lens}", f"{who}, {expr}, {light}. {lens}.",
        f"black and white portrait of {who} {bg}, {light}",
        f"profile picture: {who}, {expr}, {bg}, friendly and natural",
        f"environmental portrait of {who} {g.pick(PERSON_PLACES)}, {light}, {g.pick(IMAGE_ASPECTS)}",
        f"oil painting portrait of {who}, {bg}, visible brushstrokes", f"close-up portrait, {who}, {expr}, {lens}",
        f"Photograph {who} {expr}. {cap(light)}, {bg}.",
    ])
    return g.case(tidy(text))


BUILDINGS = [
    "a brutalist concrete library", "a glass treehouse hotel", "a Scandinavian A-frame cabin", "a floating market town",
    "a sandstone desert villa with an infinity pool", "a futuristic train station", "an Art Deco cinema facade",
    "a cliffside monastery", "a tiny bookshop with a spiral staircase", "a greenhouse restaurant",
    "a converted water tower home",
    "a timber-framed village pub", "a stilt house over a lagoon", "a modernist museum made of white curves",
    "a ruined abbey overgrown with ivy", "a capsule hotel", "a lighthouse turned into a cafe",
    "a mountain hut with a turf roof",
]
ROOMS = [
    "a small Scandinavian bedroom with a skylight", "a Japandi living room with low furniture",
    "a maximalist dining room",
    "a mid-century living room with a sunken lounge", "a minimalist bathroom with terrazzo tiles",
    "a cozy attic home office",
    "a modern farmhouse kitchen", "a kids' bedroom with a reading tent", "a boutique hotel suite in Marrakech style",
    "an industrial loft with exposed brick", "a plant-filled sunroom", "a vintage barbershop interior",
]
ARCH_STYLES = [
    "architectural photography", "interior design render", "isometric illustration", "watercolor sketch",
    "photoreal 3D render", "magazine spread style", "hand-drawn architect sketch", "tilt-shift miniature look",
]
ARCH_VIEWS = ["wide angle", "two-point perspective", "drone view", "eye level", "looking up from the street", "symmetrical front view"]


def t2i_architecture(g: Gen) -> str:
    b, r, style, view = g.pick(BUILDINGS), g.pick(ROOMS), g.pick(ARCH_STYLES), g.pick(ARCH_VIEWS)
    t = g.pick(["at dusk", "in morning fog", "at noon", "in snow", "at golden hour", "after rain", "at night"])
    text = g.pick([
        f"{b}, {style}, {t}, {view}", f"Interior photo of {r}, {g.pick(PRODUCT_LIGHTS)}, {view}",
        f"{b} {t}. {cap(style)}.", f"I'm redecorating and want a mood image: {r}, {g.pick(['warm wood tones', 'lots of green', 'earthy neutrals', 'bold colors'])}, {style}",
        f"exterior of {b}, {view}, {g.pick(LIGHTING)}", f"{r}, {style}, {g.pick(IMAGE_ASPECTS)}",
        f"concept design for {b} {t}, {view}",
    ])
    return g.case(tidy(text))


TERSE_IMAGE_SUBJECTS = TERSE_SUBJECTS + [
    "old man portrait", "cat astronaut", "mushroom house", "cyberpunk girl", "vintage car", "castle in clouds",
    "wolf in snow", "ramen shop", "desert temple", "tiny robot", "rainy window", "witch hat", "bonsai tree",
]
TERSE_IMAGE_STYLES = TERSE_STYLES + ["oil painting", "watercolor", "pixel art", "studio ghibli vibes", "ukiyo-e",
                                     "low poly", "isometric", "photoreal", "concept art", "line art", "gouache"]
TERSE_IMAGE_EXTRAS = ["highly detailed", "8k", "sharp focus", "bokeh", "symmetry", "wide angle", "close up",
                      "minimal", "rim light", "volumetric light", "2:3", "16:9", "square"]


def t2i_terse(g: Gen) -> str:
    return terse(g, [TERSE_PLACES, TERSE_TIMES, TERSE_IMAGE_STYLES, TERSE_IMAGE_EXTRAS, TERSE_IMAGE_EXTRAS],
                 TERSE_IMAGE_SUBJECTS)


POSTER_PLACES = ["the Faroe Islands", "a lunar ski resort", "Lake Bled", "Valparaíso", "a desert hot spring", "Hokkaido in winter"]
LOGO_BUSINESSES = ["a vegan bakery", "a bike repair shop", "a bouldering gym", "a podcast about space", "a tea subscription box",
                   "a small architecture studio", "a dog walking service", "a kombucha brand", "an indie game studio"]
STICKER_THINGS = ["a happy avocado", "a sleepy sloth holding coffee", "a cactus with sunglasses", "a frog on a mushroom",
                  "a tiny ghost with a balloon", "a corgi in a spacesuit", "a strawberry cow"]
TATTOO_THINGS = ["a swallow and a compass", "a sprig of olive", "a crescent moon with stars", "a koi circling a lotus",
                 "a mountain range in a circle", "a bee on a lavender stem"]
GENRES = ["shoegaze", "jazz trio", "synthwave", "folk", "doom metal", "lo-fi hip hop", "bossa nova", "punk"]
BAND_NAMES = ["Paper Lanterns", "The Quiet Engines", "Saltwater Choir", "Velvet Static", "North of Nowhere",
              "Glass Animals of Mars", "Slow Comet"]
FANTASY_PLACES = ["a city built inside a giant tree", "an underground mushroom kingdom", "a floating desert island",
                  "a frozen dragon graveyard", "a harbor for airships", "a library at the bottom of the sea",
                  "a market on the back of a moving turtle", "a village on a waterfall"]
FOOD_DISHES = ["a bowl of spicy dan dan noodles", "a stack of blueberry pancakes", "a tray of fresh croissants",
               "a colorful poke bowl", "a slice of tiramisu", "tacos with pickled onions", "a pot of bubbling curry",
               "a cheese fondue with bread cubes", "a plate of jollof rice with plantains"]


def t2i_misc(g: Gen) -> str:
    form = g.form("t2i_misc", 10)
    if form == 0:
        text = f"vintage travel poster for {g.pick(POSTER_PLACES)} with the words \"{g.pick(['VISIT', 'COME NORTH', 'ESCAPE', 'WISH YOU WERE HERE'])}\" at the {g.pick(['top', 'bottom'])}"
    elif form == 1:
        text = f"minimal logo for {g.pick(LOGO_BUSINESSES)}, {g.pick(['flat vector', 'single line', 'geometric', 'hand-drawn'])}, {g.pick(COLORS)} on white"
    elif form == 2:
        text = f"sticker of {g.pick(STICKER_THINGS)}, white border, {g.pick(['kawaii', 'cartoon', 'flat colors', 'vector style'])}"
    elif form == 3:
        text = f"fine line tattoo design of {g.pick(TATTOO_THINGS)}, {g.pick(['black ink only', 'minimal', 'with dotwork shading'])}"
    elif form == 4:
        text = f"album cover for a {g.pick(GENRES)} band called {g.pick(BAND_NAMES)}, {g.pick(TERSE_IMAGE_STYLES)}, square"
    elif form == 5:
        text = f"children's book illustration of {g.pick(WHIMSICAL)}, {g.pick(['gouache', 'colored pencil', 'soft watercolor', 'cut paper collage'])}"
    elif form == 6:
        text = f"food photography: {g.pick(FOOD_DISHES)}, {g.pick(PRODUCT_LIGHTS)}, {g.pick(FRAMINGS)}"
    elif form == 7:
        text = f"concept art of {g.pick(FANTASY_PLACES)}, {g.pick(['epic scale', 'tiny figures for scale', 'painterly', 'matte painting'])}, {g.pick(LIGHTING)}"
    elif form == 8:
        text = f"phone wallpaper of {g.pick(NATURE_CORES)}, 9:16, {g.pick(['calm', 'vivid', 'dark mode friendly', 'minimal'])}"
    else:
        text = f"birthday card illustration with {g.pick(STICKER_THINGS)} and the text \"Happy {g.pick(['30th', '7th', 'Birthday', 'Day'])}\" in {g.pick(['bubble letters', 'brush script', 'bold serif'])}"
    return g.case(tidy(text))


# --------------------------------------------------------------------------------------------------------------
# chat
# --------------------------------------------------------------------------------------------------------------

MSG_TYPES = ["email", "text", "short note", "Slack message", "WhatsApp message", "card message", "voicemail script"]
MSG_TONES = ["polite but firm", "friendly", "apologetic", "warm", "professional", "casual", "short and neutral", "lighthearted"]
MSG_TARGETS = [
    ("my neighbor", "about their dog barking every night"), ("my team", "announcing that I'm leaving the company"),
    ("a client", "asking them to pay an invoice that's 30 days overdue"),
    ("my son's teacher", "explaining why he missed a week of school"),
    ("an old friend I haven't talked to in years", "just to reconnect"),
    ("a recruiter", "turning down an offer I had already said yes to"),
    ("my roommate", "about splitting the electricity bill fairly"),
    ("my book club", "suggesting we meet every other week instead"),
    ("the HOA", "asking permission to paint my front door"), ("a wedding guest", "reminding them to RSVP"),
    ("my boss", "asking to work from home two days a week"),
    ("a contractor", "saying the bathroom job isn't finished the way we agreed"),
    ("my sister", "apologizing for missing her birthday dinner"), ("a professor", "asking for an extension on a paper"),
    ("my gym", "cancelling my membership"), ("a coworker", "thanking them for covering my shifts"),
    ("a seller on a marketplace app", "asking if the price is negotiable"),
    ("my tenants", "letting them know about a water shutoff on Friday"),
    ("my coach", "saying I need to sit out this season"), ("a customer", "apologizing for a late delivery"),
]
SITUATIONS = [
    "deal with a coworker who takes credit for my work", "stop checking my phone first thing in the morning",
    "make friends in a new city when I work from home", "politely leave a conversation at a party",
    "ask for a raise when the company is having a rough year", "get my toddler to sleep in her own bed",
    "start running when I'm completely out of shape", "keep houseplants alive in a dark apartment",
    "save money on groceries without eating boring food", "handle a friend who always cancels plans last minute",
    "train for a half marathon in four months", "negotiate rent with my landlord", "get better at remembering names",
    "stay focused when studying at home", "say no to extra work without seeming lazy",
    "split chores fairly with my partner",
    "get over stage fright before a presentation", "help my teenager with exam stress",
    "get rust off a cast iron pan", "choose between two job offers", "fall asleep faster",
    "make small talk with my in-laws", "organize a tiny closet", "start journaling and actually stick with it",
    "cope with a long-distance relationship", "learn to cook from zero", "stop overthinking texts before I send them",
    "get back into reading after years of not reading", "prepare for a long flight with a baby",
]
ADVICE_CONTEXTS = [
    "I'm pretty introverted.", "I've tried apps but nothing sticks.", "Keep it realistic, I'm busy.",
    "I have about 20 minutes a day.", "Budget is tight.", "", "", "I'm in my late 30s if that matters.",
    "Nothing I've read online has worked so far.",
]
RECS = [
    ("board games", "for a family with kids aged 6 and 10"), ("podcasts", "about history for long drives"),
    ("houseplants", "that are safe for cats"),
    ("novels", "for someone who loved fantasy as a kid but hasn't read in years"),
    ("weekend trips", "from Chicago without flying"), ("hobbies", "that don't involve screens"),
    ("easy lunches", "I can prep on Sunday for the whole week"),
    ("gift ideas", "for a coworker retiring after 20 years"),
    ("stretches", "I can do at my desk"), ("date ideas", "under $30"),
    ("songs", "for a road trip with my dad who loves 70s rock"),
    ("movies", "that are scary but not gory"), ("breakfasts", "high in protein without eggs"),
    ("indoor activities", "for a rainy day with a 4-year-old"), ("trail snacks", "for a long day hike"),
    ("documentaries", "about food and farming"), ("video games", "my grandma could enjoy"),
    ("ways to use up", "a big bag of zucchini from the garden"),
]
DIFFS = [
    ("baking soda", "baking powder"), ("a latte", "a flat white"), ("a credit score", "a credit report"),
    ("an LLC", "a sole proprietorship"), ("a crocodile", "an alligator"), ("empathy", "sympathy"),
    ("a will", "a trust"),
    ("jam", "jelly"), ("a condo", "a townhouse"), ("stocks", "bonds"), ("an index fund", "an ETF"),
    ("affect", "effect"),
    ("a cold", "the flu"), ("prosecco", "champagne"), ("a psychologist", "a psychiatrist"), ("HIIT", "steady cardio"),
    ("a mortgage broker", "going straight to a bank"), ("a debit card", "a credit card for building credit"),
]
CITIES = ["Kyoto", "Mexico City", "Edinburgh", "Vienna", "Buenos Aires", "Hanoi", "Copenhagen", "Marrakech", "Montreal",
          "Seville", "Istanbul", "Cape Town", "Seoul", "Porto", "Budapest", "Oaxaca", "Tbilisi"]
TRIP_LENGTHS = ["a long weekend", "three days", "five days", "a week", "two days"]
TRIP_WHEN = ["in late October", "in July", "over New Year", "in early spring", "during the rainy season", ""]
TRIP_WHO = ["with my mom, who walks with a cane", "solo", "with two kids under 8", "with my partner", "with three college friends"]
TRIP_LIKES = ["street food and live music", "architecture and long walks", "museums and bookshops",
              "markets and cooking classes", "hiking and day trips", "bars and late nights", "gardens and slow mornings"]
TRIP_ASKS = ["Can you suggest a rough plan?", "What should we not miss?", "Sketch a day-by-day plan?",
             "Which neighborhood should we stay in?", "What would you skip?"]
INGREDIENTS = [
    "leftover rice", "a can of black beans", "half a cabbage", "eggs", "frozen peas", "feta", "sweet potatoes",
    "a block of tofu", "ground turkey", "two lemons", "a bag of spinach", "canned tomatoes", "pasta", "chicken thighs",
    "mushrooms", "an eggplant", "tortillas", "cheddar", "red lentils", "bell peppers", "Greek yogurt", "bacon",
]
BUSINESSES = [
    "a mobile bike repair service", "a dog grooming van", "a plant shop that also sells coffee",
    "a podcast about local history", "a board game cafe", "a small candle company",
    "a tutoring business for high school math", "a food truck selling Korean tacos", "a wedding photography studio",
    "a YouTube channel about budget travel", "a bookbinding workshop", "a kids' soccer team",
    "a vintage clothing stall",
]
WRITING_FORMS = ["a short poem", "a limerick", "a haiku", "a two-paragraph bedtime story", "a funny toast",
                 "a short pep talk", "a six-word story", "a sonnet", "a silly song"]
WRITING_TOPICS = [
    "a cat who thinks she owns the moon", "Monday mornings", "my grandfather's vegetable garden",
    "a lost sock looking for its pair", "the last day of summer camp", "moving to a new city",
    "a robot learning to bake",
    "a retiring school bus driver", "the first snow of the year", "a dragon afraid of the dark",
    "my team finishing a big project",
]
STIFF_SENTENCES = [
    "Kindly be advised that the meeting has been rescheduled to a later date to be determined.",
    "It is with great regret that I must inform you of my inability to attend the gathering.",
    "hey so the thing is broken again and idk why, can someone look at it asap",
    "We would like to leverage this opportunity to circle back regarding the aforementioned proposal.",
    "Your request has been received and will be processed in due course.",
    "I was wondering if maybe possibly you might have some time to perhaps chat at some point?",
    "Attached herewith please find the requested documentation for your perusal.",
    "ur invoice is late pls pay",
    "Pursuant to our discussion, the deadline cannot be extended under any circumstances.",
    "I just wanted to quickly check in and see if there was any update, no worries if not!",
]
REWRITE_GOALS = ["friendlier", "more professional", "shorter", "less passive-aggressive", "more confident", "warmer",
                 "clearer", "less formal"]


def chat_row(g: Gen) -> str:
    form = g.form("chat_row", 10)
    if form == 0:
        who, about = g.pick(MSG_TARGETS)
        tone, kind = g.pick(MSG_TONES), g.pick(MSG_TYPES)
        text = g.pick([
            f"Can you help me write {an(tone)} {kind} to {who} {about}?",
            f"write {an(kind)} to {who} {about}. {cap(tone)}, not too long",
            f"I need to send {who} {an(kind)} {about}. Could you draft something {tone}?",
            f"Draft {an(tone)} {kind} for {who} {about}.",
        ])
    elif form == 1:
        s, ctx = g.pick(SITUATIONS), g.pick(ADVICE_CONTEXTS)
        text = g.pick([f"How do I {s}? {ctx}", f"any tips on how to {s}", f"What's the best way to {s}? {ctx}",
                       f"I struggle to {s}. Where should I start?", f"how can i {s}", f"Give me a few practical ideas to {s}. {ctx}"])
    elif form == 2:
        things, constraint = g.pick(RECS)
        n = g.pick(["three", "five", "a few", "7", "10"])
        text = g.pick([f"Suggest {n} {things} {constraint}.", f"can you recommend some {things} {constraint}?",
                       f"I need {things} {constraint}. Any ideas?",
                       f"List {n} {things} {constraint} with one line on why each works."])
    elif form == 3:
        a, b = g.pick(DIFFS)
        text = g.pick([f"What's the difference between {a} and {b}?", f"{a} vs {b}: what's actually different?",
                       f"Can you explain {a} versus {b} in simple terms?",
                       f"is there a real difference between {a} and {b} or is it just marketing"])
    elif form == 4:
        city, length, when, who = g.pick(CITIES), g.pick(TRIP_LENGTHS), g.pick(TRIP_WHEN), g.pick(TRIP_WHO)
        we = "I" if who == "solo" else "we"
        text = g.pick([
            f"I'm going to {city} for {length} {when} {who}. {cap(we)} like {g.pick(TRIP_LIKES)}. {g.pick(TRIP_ASKS)}",
            f"{length} in {city} {when}, into {g.pick(TRIP_LIKES)}. what's a good plan?",
            f"First time in {city}, {length}, {who}. {g.pick(TRIP_ASKS)}",
        ])
    elif form == 5:
        items = g.sample(INGREDIENTS, g.randint(3, 5))
        listed = ", ".join(items[:-1]) + " and " + items[-1]
        diet = g.pick(["", "", "No dairy please.", "I have 30 minutes.", "My kids are picky.", "Only one pot if possible."])
        text = g.pick([f"What can I make for dinner with {listed}? {diet}", f"I have {listed}. Any ideas for a quick meal? {diet}",
                       f"recipe idea using {listed}, nothing fancy", f"Something I can cook tonight with {listed}? {diet}"])
    elif form == 6:
        b = g.pick(BUSINESSES)
        text = g.pick([f"Give me {g.pick(['8', '10', '12', 'some'])} name ideas for {b}.", f"help me name {b}",
                       f"brainstorm catchy names for {b}, {g.pick(['nothing too punny', 'puns welcome', 'short and modern'])}"])
    elif form == 7:
        f, t = g.pick(WRITING_FORMS), g.pick(WRITING_TOPICS)
        text = g.pick([f"Write {f} about {t}.", f"can you write {f} about {t}?",
                       f"I need {f} about {t} for {g.pick(['a card', 'my kid', 'a team meeting', 'a newsletter'])}."])
    elif form == 8:
        s, goal = g.pick(STIFF_SENTENCES), g.pick(REWRITE_GOALS)
        text = g.pick([f"Make this sound {goal}: \"{s}\"", f"Rewrite this so it's {goal}: \"{s}\"",
                       f"can you fix the tone of this, I want it {goal}. \"{s}\""])
    else:
        a, b = g.pick([
            ("getting a dog", "getting a cat"), ("renting", "buying a small condo"),
            ("learning guitar", "learning piano"),
            ("a gym membership", "a home workout setup"), ("taking a gap year", "going straight to university"),
            ("an electric car", "a used hybrid"), ("a standing desk", "a really good office chair"),
            ("a Kindle", "paper books"), ("a big wedding", "a small one and a long honeymoon"),
            ("freelancing", "staying at my salaried job"), ("a road bike", "a gravel bike"),
        ])
        text = g.pick([f"Should I choose {a} or {b}? Give me the main tradeoffs.",
                       f"pros and cons of {a} vs {b}", f"I'm torn between {a} and {b}. Help me think it through."])
    return g.case(tidy(text), lower=0.2)


# --------------------------------------------------------------------------------------------------------------
# code
# --------------------------------------------------------------------------------------------------------------

LANGS = ["Python", "JavaScript", "TypeScript", "Go", "Rust", "Java", "C#", "C++", "Kotlin", "Ruby", "Swift", "PHP"]
CODE_TASKS = [
    "returns the n most common words in a text, ignoring case and punctuation",
    "checks whether two strings are anagrams",
    "rotates a square matrix 90 degrees clockwise", "converts a Roman numeral to an integer",
    "merges overlapping intervals",
    "validates a card number with the Luhn algorithm", "finds the longest common prefix of a list of strings",
    "groups words by their first letter", "converts a snake_case identifier to camelCase",
    "returns all permutations of a short string", "computes a moving average with a given window size",
    "parses a duration like '1h30m15s' into total seconds", "checks whether brackets in a string are balanced",
    "collapses runs of repeated characters into one", "computes the Levenshtein distance between two strings",
    "returns the second largest distinct value in an array",
    "formats a byte count as a human-readable size like 1.5 MB",
    "finds the first character that appears only once in a string", "converts a hex color like #1a2b3c to RGB values",
    "returns the dates of all Mondays in a given month", "computes the median of a list of numbers",
    "flattens arbitrarily nested lists", "checks if an integer is a perfect square without floating point",
    "run-length encodes a string", "generates a random password with at least one digit, symbol and uppercase letter",
    "counts islands in a grid of 0s and 1s", "truncates text to n characters without cutting a word in half",
    "finds all pairs in an array that sum to zero", "returns the first n rows of Pascal's triangle",
    "returns the prime factors of an integer", "shuffles an array in place with Fisher-Yates",
    "parses a URL query string into key-value pairs", "retries an operation up to three times with exponential backoff",
    "turns a blog post title into a URL slug", "finds the longest palindromic substring",
    "transposes a CSV table given as a list of rows", "checks whether a sudoku grid is valid",
]
HOWTOS = [
    "read a JSON file into a data structure", "parse command-line arguments", "sort records by two fields",
    "make an HTTP POST request with a JSON body", "run several tasks concurrently and wait for all of them",
    "write a unit test that checks an error is raised", "format the current date as ISO 8601",
    "remove duplicates from a list while keeping order", "read an environment variable with a default value",
    "process a huge file line by line without loading it into memory", "time how long a function takes",
    "convert a string to an integer safely", "write a file atomically", "generate a UUID",
    "split a string on several different delimiters", "log messages with timestamps", "pretty-print nested data",
    "compare floating point numbers safely", "run a function every 10 seconds", "handle Ctrl+C gracefully",
]
CODE_DIFFS = [
    ("Python", "a list", "a tuple"), ("Python", "`is`", "`==`"), ("Python", "`copy.copy`", "`copy.deepcopy`"),
    ("Python", "a generator expression", "a list comprehension"), ("JavaScript", "`let`", "`var`"),
    ("JavaScript", "`==`", "`===`"), ("JavaScript", "`map`", "`forEach`"),
    ("Go", "buffered channels", "unbuffered channels"),
    ("Go", "value receivers", "pointer receivers"), ("Rust", "`String`", "`&str`"), ("Rust", "`Box`", "`Rc`"),
    ("SQL", "`WHERE`", "`HAVING`"), ("SQL", "`UNION`", "`UNION ALL`"), ("C", "`malloc`", "`calloc`"),
    ("Java", "an abstract class", "an interface"), ("Java", "`ArrayList`", "`LinkedList`"),
    ("TypeScript", "`type`", "`interface`"), ("C++", "`std::unique_ptr`", "`std::shared_ptr`"),
    ("Bash", "single quotes", "double quotes"), ("Git", "merge", "rebase"), ("Python", "`__str__`", "`__repr__`"),
    ("Kotlin", "`val`", "`var`"),
]
SQL_TASKS = [
    ("`orders(id, customer_id, total, created_at)`", "monthly revenue for the last 12 months"),
    ("`employees(id, name, department, salary)`", "the highest paid employee in each department"),
    ("`page_views(user_id, url, viewed_at)`", "the 5 most viewed URLs for each day"),
    ("`products(id, name, price)` and `order_items(order_id, product_id, qty)`", "products that have never been ordered"),
    ("`logins(user_id, login_at)`", "users who logged in on 3 or more consecutive days"),
    ("`students(id, name)` and `grades(student_id, course, score)`", "each student's average score, only for students with at least 3 grades"),
    ("`transactions(id, account_id, amount, ts)`", "a running balance per account ordered by time"),
    ("`tickets(id, status, opened_at, closed_at)`", "the median time to close a ticket, per week"),
    ("`books(id, title, author_id)` and `authors(id, name)`", "authors with more than 5 books, sorted by count"),
    ("`sessions(id, user_id, started_at, ended_at)`", "total session time per user in hours"),
]
BASH_TASKS = [
    "rename all .jpeg files in a folder to .jpg", "find the 10 largest files under the current directory",
    "count how many times each IP appears in an nginx access log",
    "print a line whenever a file in a directory changes",
    "replace a string in every .txt file recursively", "check that a website returns HTTP 200 and alert me if not",
    "split a big CSV into files of 1000 lines each, keeping the header", "kill whatever is listening on port 8080",
    "download a list of URLs from a text file in parallel", "zip every subfolder of the current directory separately",
]
REGEX_TARGETS = [
    "UK postcodes", "hex color codes with or without the #", "times in 24-hour HH:MM format",
    "US phone numbers in a few common formats", "semantic version strings like 1.2.3 or 1.2.3-beta",
    "hashtags in a tweet",
    "simple email addresses", "markdown links", "prices like $1,299.99", "dates like 3 March 2024",
]


def code_row(g: Gen) -> str:
    form = g.form("code_row", 8)
    if form <= 2:
        lang, task = g.pick(LANGS), g.pick(CODE_TASKS)
        text = g.pick([f"Write a {lang} function that {task}.", f"{lang}: function that {task}",
                       f"How would you write a function in {lang} that {task}? Include a couple of tests.",
                       f"Can you show me {lang} code that {task}?", f"need a quick {lang} snippet that {task}",
                       f"Implement a function that {task}, in {lang}, with a short explanation of the complexity."])
    elif form == 3:
        lang, how = g.pick(LANGS), g.pick(HOWTOS)
        text = g.pick([f"In {lang}, how do I {how}?", f"{lang} question: what's the idiomatic way to {how}?",
                       f"how to {how} in {lang}", f"Show me how to {how} in {lang} with a short example."])
    elif form == 4:
        lang, a, b = g.pick(CODE_DIFFS)
        text = g.pick([f"In {lang}, what's the difference between {a} and {b}?", f"{lang}: {a} vs {b}, when should I use which?"])
    elif form == 5:
        schema, q = g.pick(SQL_TASKS)
        text = g.pick([f"SQL: given {schema}, write a query for {q}.", f"I have a table {schema}. How do I get {q}?",
                       f"Write a Postgres query that returns {q} from {schema}."])
    elif form == 6:
        t = g.pick(BASH_TASKS)
        text = g.pick([f"bash script to {t}", f"How do I {t} from the command line?", f"Write a shell one-liner to {t}."])
    else:
        r = g.pick(REGEX_TARGETS)
        text = g.pick([f"regex for {r}?", f"Write a regular expression that matches {r} and explain how it works.",
                       f"I need a regex to pull {r} out of text, with a {g.pick(LANGS[:3])} example."])
    starts_with_name = text.split(" ")[0].rstrip(":") in LANGS + ["SQL", "Git", "Bash", "C"]
    return g.case(tidy(text), lower=0.0 if starts_with_name else 0.2)


# --------------------------------------------------------------------------------------------------------------
# stem
# --------------------------------------------------------------------------------------------------------------

CONCEPTS = [
    "how vaccines train the immune system", "what a black hole's event horizon is",
    "how photosynthesis turns light into chemical energy", "why earthquakes cluster along plate boundaries",
    "how noise-cancelling headphones work", "what an eigenvector means geometrically", "how a refrigerator moves heat",
    "why the ocean is salty", "how CRISPR edits genes", "what quantum entanglement is and what it is not",
    "how a neural network learns with backpropagation", "the Doppler effect", "how lithium-ion batteries store energy",
    "why astronomers think dark matter exists", "how the kidneys filter blood", "why bridges need expansion joints",
    "how a compiler turns source code into machine code", "what standard deviation measures",
    "why antibiotics don't work against viruses", "how the Moon and Sun cause tides",
    "how hash tables get fast lookups",
    "what oxidation states are", "how sound travels through solids, liquids and gases", "what a Fourier transform does",
    "how a nuclear reactor keeps its chain reaction under control", "how DNS resolves a domain name",
    "how the greenhouse effect works", "how rockets accelerate in the vacuum of space",
    "how CPU caches speed up programs",
    "how the heart keeps its rhythm", "how carbon dating works", "how rivers carve valleys over time",
    "what makes a problem NP-complete", "how optical fibers guide light around bends",
    "how a catalytic converter cleans exhaust",
    "why nothing can travel faster than light", "how a transformer steps voltage up or down", "what a Markov chain is",
]
AUDIENCES = ["", "", " like I'm in high school", " for a first-year engineering student", " in simple terms",
             " with an everyday analogy", " in about 150 words", " and give one real-world example", " to a 12-year-old"]
WHYS = [
    "does a spoon look bent in a glass of water", "do onions make you cry", "does salt melt ice on roads",
    "do planes leave contrails", "does metal feel colder than wood at the same temperature",
    "do stars twinkle but planets mostly don't", "does bread go stale", "do we get goosebumps",
    "does a curveball curve",
    "do leaves change color in autumn", "does popcorn pop", "does a microwave heat food unevenly",
    "do jets cruise at such high altitudes", "does the Moon always show the same face to Earth",
    "does water expand when it freezes", "do some people get motion sickness and others don't",
    "does lightning zigzag", "are most metals shiny", "does ice cream taste less sweet when it's very cold",
    "does a soap bubble show rainbow colors", "do cats always land on their feet", "does the sky turn red at sunset",
]
STEM_DIFFS = [
    ("a virus", "a bacterium"), ("speed", "velocity"), ("mass", "weight"), ("an element", "a compound"), ("AC", "DC"),
    ("heat", "temperature"), ("a comet", "an asteroid"), ("RAM", "disk storage"),
    ("exothermic", "endothermic reactions"),
    ("genotype", "phenotype"), ("a process", "a thread"), ("nuclear fission", "nuclear fusion"),
    ("a hurricane", "a tornado"),
    ("DNA", "RNA"), ("covalent", "ionic bonds"), ("series", "parallel circuits"), ("compiled", "interpreted languages"),
    ("a stack", "a queue"), ("weather", "climate"), ("an acid", "a base"),
]


def stem_numeric(g: Gen) -> str:
    form = g.form("stem_numeric", 16)
    if form == 0:
        v, h = g.randint(5, 25), g.pick([20, 45, 80, 125])
        return f"A ball is thrown horizontally at {v} m/s off a {h} m high cliff. How long is it in the air, and how far from the base does it land? Ignore air resistance."
    if form == 1:
        v, r = g.pick([3, 5, 9, 12, 24]), g.pick([4, 10, 47, 220, 1000])
        return f"A {v} V battery is connected across a {r} ohm resistor. What current flows, and how much power does the resistor dissipate?"
    if form == 2:
        vol, t, p = g.pick([2, 5, 10, 22.4, 50]), g.randint(0, 80), g.pick([80, 101.3, 150, 200])
        return f"How many moles of an ideal gas fill a {vol} L container at {t} °C and {p} kPa?"
    if form == 3:
        ml, m = g.pick([250, 500, 750, 1000]), g.pick([0.1, 0.25, 0.5, 1.5, 2])
        salt = g.pick([("NaCl", "sodium chloride"), ("KCl", "potassium chloride"), ("glucose", "glucose")])
        return f"How many grams of {salt[1]} ({salt[0]}) do I need to make {ml} mL of a {m} M solution? Show the steps." if salt[0] != "glucose" \
            else f"How many grams of glucose do I need for {ml} mL of a {m} M solution?"
    if form == 4:
        c = g.pick(["0.01", "0.001", "0.05", "0.2", "0.0025"])
        acid = g.pick(["HCl", "HNO3", "NaOH", "KOH"])
        return f"What is the pH of a {c} M {acid} solution at 25 °C?"
    if form == 5:
        t, m, k = g.pick([3, 8, 12, 30]), g.pick([40, 64, 100, 250]), g.randint(2, 5)
        return f"An isotope has a half-life of {t} days. Starting with {m} g, how much remains after {t * k} days?"
    if form == 6:
        m, v = g.pick([900, 1200, 1500, 2000]), g.pick([36, 54, 72, 90, 108])
        return f"A {m} kg car traveling at {v} km/h brakes to a stop. How much kinetic energy has to be dissipated, and where does it go?"
    if form == 7:
        m, h, t = g.randint(50, 95), g.pick([6, 9, 12, 15]), g.randint(6, 20)
        return f"A {m} kg person runs up {h} m of stairs in {t} seconds. What is their average power output in watts?"
    if form == 8:
        length = g.pick([0.25, 0.5, 1, 2, 2.5])
        return f"What is the period of a simple pendulum {length} m long on Earth, and how would it change on the Moon?"
    if form == 9:
        m, t1, t2 = g.pick([0.5, 1, 2, 3.5]), g.randint(5, 25), g.randint(60, 100)
        return f"How much energy does it take to heat {m} kg of water from {t1} °C to {t2} °C? How long would a 2 kW kettle take, ignoring losses?"
    if form == 10:
        x, m = g.randint(2, 12), g.pick([0.2, 0.5, 1, 2])
        return f"A spring stretches {x} cm when a {m} kg mass hangs from it. What is the spring constant, and how far would a {m * 3:g} kg mass stretch it?"
    if form == 11:
        a, b, c, mass = g.randint(5, 20), g.randint(5, 20), g.randint(2, 10), g.randint(100, 1500)
        return f"A block of material measures {a} cm x {b} cm x {c} cm and has a mass of {mass} g. What is its density, and will it float in water?"
    if form == 12:
        f = g.pick([110, 256, 440, 880, 2000])
        return f"A tone of {f} Hz travels through air at 343 m/s. What is its wavelength? What happens to the wavelength in water?"
    if form == 13:
        d, f = g.pick([15, 20, 30, 45, 60]), g.pick([10, 12, 25])
        return f"An object sits {d} cm in front of a converging lens with a focal length of {f} cm. Where does the image form, and what is the magnification?"
    if form == 14:
        n, k = g.randint(8, 16), g.pick([26, 36, 62, 94])
        return f"How many bits of entropy does a random {n}-character password have if each character comes from a set of {k} symbols?"
    cap_uf, v = g.pick([10, 47, 100, 470, 2200]), g.pick([5, 9, 12, 50])
    return f"How much energy is stored in a {cap_uf} µF capacitor charged to {v} V?"


def stem_row(g: Gen) -> str:
    form = g.form("stem_row", 6)
    if form <= 1:
        c, aud = g.pick(CONCEPTS), g.pick(AUDIENCES)
        text = g.pick([f"Explain {c}{aud}.", f"Can you explain {c}{aud}?", f"I never understood {c}. Could you break it down{aud}?",
                       f"{c}: explain it{aud or ' briefly'}"])
    elif form == 2:
        w = g.pick(WHYS)
        text = g.pick([f"Why {w}?", f"why {w}", f"Quick science question: why {w}?",
                       f"My kid asked me \"why {w}?\" and I had no good answer. Help?"])
    elif form == 3:
        a, b = g.pick(STEM_DIFFS)
        text = g.pick([f"What's the difference between {a} and {b}?", f"{a} vs {b}?", f"Explain {a} versus {b} with an example."])
    else:
        text = stem_numeric(g)
    return g.case(tidy(text), lower=0.15)


# --------------------------------------------------------------------------------------------------------------
# math
# --------------------------------------------------------------------------------------------------------------

NAMES = ["Amara", "Tomás", "Mei", "Olu", "Ingrid", "Rahul", "Sofia", "Kwame", "Hana", "Diego", "Noor", "Felix", "Yuki",
         "Zainab", "Marek", "Leila", "Arjun", "Beatriz", "Sven", "Chidi"]
WORDS = ["PEPPER", "LETTER", "COMMITTEE", "STATISTICS", "APPLE", "TOMATO", "BALLOON", "KAYAK", "PARALLEL", "COOKBOOK", "ERROR"]


def signed(n: int) -> str:
    return f"+ {n}" if n >= 0 else f"- {-n}"


def poly(coefs: list[int]) -> str:
    """Coefficients from the highest power down, as a readable polynomial in x."""
    terms, deg = [], len(coefs) - 1
    for i, c in enumerate(coefs):
        p = deg - i
        if c == 0:
            continue
        mag = abs(c)
        body = ("" if mag == 1 and p else str(mag)) + ("x" if p >= 1 else "") + (f"^{p}" if p > 1 else "")
        terms.append(("-" if c < 0 else "+", body))
    out = ("-" if terms[0][0] == "-" else "") + terms[0][1]
    for sign, body in terms[1:]:
        out += f" {sign} {body}"
    return out


def math_row(g: Gen) -> str:
    name, name2 = g.sample(NAMES, 2)
    form = g.form("math_row", 32)
    if form == 0:
        x, a, b = g.randint(-9, 12), g.randint(2, 7), g.randint(-8, 9)
        c = g.pick([k for k in range(1, 9) if k != a])
        d = a * (x + b) - c * x
        return f"Solve {a}(x {signed(b)}) = {c if c > 1 else ''}x {signed(d)} for x.".replace(" + 0 for", " for").replace("(x + 0)", "x")
    if form == 1:
        r1, r2 = g.randint(-9, 9), g.randint(1, 9)
        ask = g.pick(["What are its roots?", "Find both solutions and check them.", "What is the sum of the squares of the roots?"])
        return f"Consider x^2 {signed(-(r1 + r2))}x {signed(r1 * r2)} = 0. {ask}".replace("+ 0x ", "").replace("x + 0 =", "x =")
    if form == 2:
        x, y = g.randint(-6, 9), g.randint(-6, 9)
        a, b, c, d = g.randint(1, 6), g.randint(1, 6), g.randint(1, 6), g.randint(1, 6)
        if a * d == b * c:
            d += 1
        k = lambda v: "" if v == 1 else str(v)  # noqa: E731
        return f"Find x and y if {k(a)}x + {k(b)}y = {a * x + b * y} and {k(c)}x - {k(d)}y = {c * x - d * y}."
    if form == 3:
        p, dsc, tax = g.pick([40, 64, 85, 120, 199]), g.pick([10, 15, 20, 30, 35]), g.pick([5, 7, 8, 10])
        return f"A jacket costs ${p}. It is discounted by {dsc}%, then {tax}% sales tax is added. What is the final price?"
    if form == 4:
        d1, v1, d2, v2 = g.pick([60, 90, 120]), g.pick([40, 60, 80]), g.pick([30, 60, 150]), g.pick([50, 90, 100])
        return f"{name} drives {d1} km at {v1} km/h and then {d2} km at {v2} km/h. What is the average speed over the whole trip?"
    if form == 5:
        a, b = g.pick([2, 3, 4, 5]), g.pick([6, 8, 10, 12])
        return f"One pipe fills a tank in {a} hours and a drain empties it in {b} hours. If both are open, how long does it take to fill the empty tank?"
    if form == 6:
        v, p1, p2 = g.pick([4, 6, 10, 12]), g.pick([5, 10, 15]), g.pick([30, 40, 50])
        x = g.pick([2, 3, 4, 6, 8])
        while (p1 * x + p2 * v) % (x + v):
            x += 1
        p3 = (p1 * x + p2 * v) // (x + v)
        return f"How many liters of a {p1}% salt solution must be added to {v} L of a {p2}% solution to get a {p3}% solution?"
    if form == 7:
        principal, r, n = g.pick([500, 1200, 2500, 8000]), g.pick([2, 3.5, 4, 6]), g.randint(2, 10)
        return f"{name} deposits ${principal:,} in an account paying {r}% a year, compounded monthly. How much is in the account after {n} years?"
    if form == 8:
        d, w = g.pick([6, 10, 14, 20]), g.pick([1, 1.5, 2])
        return f"A circular pond has a diameter of {d} m and is surrounded by a path {w} m wide. What is the area of the path?"
    if form == 9:
        k, (a, b) = g.randint(2, 6), g.pick([(3, 4), (5, 12), (8, 15), (7, 24)])
        return f"A rectangular screen is {a * k} inches wide and {b * k} inches tall. How long is its diagonal?"
    if form == 10:
        n, k = g.randint(8, 15), g.randint(3, 5)
        return g.pick([f"How many ways can a team of {k} be picked from {n} players?",
                       f"In how many ways can a team of {k} be chosen from {n} players if two of them refuse to be on the same team?"])
    if form == 11:
        w = g.pick(WORDS)
        return f"In how many different orders can the letters of {w} be written?"
    if form == 12:
        target = g.randint(3, 11)
        return g.pick([f"Two dice are rolled. What is the probability that the larger of the two numbers is {min(target, 6)}?",
                       f"Two dice are rolled. What is the chance their product is greater than {target * 2}?",
                       f"If you roll two dice, what's the probability the difference between them is {target % 6}?"])
    if form == 13:
        r, b, k = g.randint(3, 9), g.randint(2, 8), g.randint(2, 3)
        return f"A jar has {r} red and {b} blue marbles. {name} takes {k} at random without putting any back. What is the probability they are all red?"
    if form == 14:
        a, b, c = g.sample([4, 6, 9, 10, 12, 14, 15, 18, 21, 25], 3)
        return f"Find the least common multiple of {a}, {b} and {c}."
    if form == 15:
        a, n = g.randint(2, 9), g.randint(50, 999)
        return f"What is the last digit of {a}^{n}?"
    if form == 16:
        s = g.randint(4, 20)
        return f"How many three-digit numbers have digits that add up to {s}?"
    if form == 17:
        n = g.pick([84, 96, 120, 144, 180, 210, 252, 300])
        return f"What is the sum of all the positive divisors of {n}?"
    if form == 18:
        n, a, d = g.randint(10, 60), g.randint(-5, 20), g.randint(2, 9)
        return f"Find the sum of the first {n} terms of the sequence {a}, {a + d}, {a + 2 * d}, {a + 3 * d}, ..."
    if form == 19:
        t, start, h = g.pick([15, 20, 30, 45]), g.pick([50, 100, 300]), g.randint(2, 6)
        return f"A bacterial culture doubles every {t} minutes. If it starts with {start} cells, how many are there after {h} hours?"
    if form == 20:
        coefs = [g.randint(-5, 6) or 1 for _ in range(g.randint(3, 4))]
        x0 = g.randint(-3, 3)
        return g.pick([f"Differentiate f(x) = {poly(coefs)} and find f'({x0}).",
                       f"Where does f(x) = {poly(coefs)} have a horizontal tangent?"])
    if form == 21:
        coefs = [g.randint(-4, 6) or 2 for _ in range(g.randint(2, 4))]
        a, b = sorted(g.sample(range(-2, 5), 2))
        return f"Evaluate the integral of {poly(coefs)} dx from {a} to {b}."
    if form == 22:
        vals = [g.randint(1, 30) for _ in range(g.randint(6, 9))]
        vals.append(g.pick(vals))
        g.r.shuffle(vals)
        return f"For the data {', '.join(map(str, vals))}, find the mean, median and mode."
    if form == 23:
        cups, s, t = g.pick([1.5, 2, 2.5, 3]), g.pick([4, 6, 8]), g.pick([10, 12, 15, 20])
        return f"A recipe uses {cups} cups of flour for {s} servings. How much flour is needed for {t} servings?"
    if form == 24:
        b_age, n, m = g.randint(4, 15), g.randint(3, 12), g.randint(2, 3)
        a_age = m * (b_age + n) - n
        return f"{name} is {a_age - b_age} years older than {name2}. In {n} years, {name} will be {m} times as old as {name2}. How old is each now?"
    if form == 25:
        pts = [(g.randint(-6, 8), g.randint(-6, 8)) for _ in range(3)]
        return "Find the area of the triangle with vertices " + ", ".join(f"({x}, {y})" for x, y in pts) + "."
    if form == 26:
        b, k = g.pick([2, 3, 5]), g.randint(3, 7)
        return g.pick([f"Solve {b}^(x + 1) = {b ** k}.", f"What is log base {b} of {b ** k}, and why?"])
    if form == 27:
        n, b = g.randint(100, 5000), g.pick([2, 3, 5, 8, 16])
        return f"Convert {n} to base {b}, showing the repeated division."
    if form == 28:
        h, m = g.randint(1, 12), g.pick([5, 10, 15, 20, 25, 40, 45, 50])
        return f"What is the smaller angle between the hour and minute hands of a clock at {h}:{m:02d}?"
    if form == 29:
        k, p = g.randint(2, 5), g.pick([48, 60, 72, 96, 120])
        return f"A rectangular field is {k} times as long as it is wide, and its perimeter is {p} m. What is its area?"
    if form == 30:
        k, first = g.randint(3, 6), 2 * g.randint(1, 30)
        total = sum(first + 2 * i for i in range(k))
        return f"The sum of {k} consecutive even numbers is {total}. What is the largest of them?"
    a, b, c, d = g.randint(1, 3), g.pick([4, 6, 8]), g.randint(1, 3), g.pick([5, 6, 10, 12])
    while a * d + c * b >= b * d:
        a, c = max(1, a - 1), max(1, c - 1)
        d += 2
    return f"{name} eats {a}/{b} of a pizza and {name2} eats {c}/{d} of it. What fraction of the pizza is left?"


# --------------------------------------------------------------------------------------------------------------
# Hand-written rows (prompt, image caption or None)
# --------------------------------------------------------------------------------------------------------------

HANDWRITTEN: dict[str, list[tuple[str, str | None]]] = {
    "text-to-video": [
        ("a jellyfish made of stained glass drifting through a cathedral, light passing through it onto the pews", None),
        ("slow motion: a wave of dominoes running through an entire library, knocking over the last one onto a sleeping cat", None),
        ("8 bit video game style, a tiny knight jumping between floating platforms over lava, side scroller camera", None),
        ("Time-lapse of a corner bakery from 4am to closing time, customers blurring in and out, bread shelves emptying", None),
        ("paper boat sailing down a flooded city street at night, reflections of neon, camera at water level", None),
        ("grandpa teaching a robot to fish off a dock. robot very bad at it. sweet, funny, golden light", None),
        ("Underwater POV as a diver swims through the hull of a sunken cargo ship, flashlight beam cutting through silt.", None),
        ("a vending machine in the middle of a snowy forest, glowing. a deer walks up to it. 6 seconds, eerie but cute", None),
        ("I need a looping background video for a cafe TV: rain on a window with a blurry street behind, warm interior reflections, totally calm, no people in focus.", None),
        ("vertical 9:16, a matcha latte being poured into a glass of ice, slow mo, milky swirls, pastel green background", None),
        ("First person view riding a bike down a steep Italian village street, laundry overhead, nonna waving from a doorway", None),
        ("a chess piece knight slowly coming alive and stepping off the board onto a wooden table, macro, candlelight", None),
        ("Drone flight through a canyon that turns into a city of skyscrapers halfway through, seamless transition, epic", None),
        ("two elderly sisters dancing in their kitchen to a song on the radio, one of them holding a wooden spoon, handheld, warm", None),
        ("An origami fox unfolds itself on a desk and runs away across the paperwork. Stop motion feel, 5 sec.", None),
        ("rocket launch seen from a fishing boat miles away, the crew stops working to watch, golden dusk", None),
        ("snails racing on a garden wall like it's formula one. commentator energy. super macro", None),
        ("Aerial shot following a red train through autumn forests in Japan, mountains layered in haze behind", None),
        ("hmm I want something calming for my meditation app: a single candle flame in a dark room, breathing slowly brighter and dimmer, maybe 10 seconds, loop", None),
        ("old polaroid photos on a table slowly developing one by one, each showing a different summer memory", None),
    ],
    "image-to-video": [
        ("make the steam come off the coffee and the newspaper pages flutter a bit",
         "A cup of black coffee and a folded newspaper on a metal table outside a cafe. Morning sun falls across the table."),
        ("have the lighthouse beam sweep around as the sky gets darker",
         "A white lighthouse on a grassy headland at sunset. The sea is calm and a few gulls sit on the fence."),
        ("The toddler should clap his hands and giggle.",
         "A toddler in a striped onesie sitting in a high chair with mashed banana on his face."),
        ("slow dolly along the bookshelf, books gently glowing one after another",
         "A tall wooden bookshelf packed with old leather-bound books in a dim study."),
        ("make the kite rise higher and the string go taut, grass blowing",
         "A girl holding the string of a diamond-shaped orange kite on a hilltop on a windy day."),
        ("animate the gears turning at different speeds, slow camera push",
         "A close-up of brass clockwork gears inside an open antique clock."),
        ("Let the hot air balloons slowly rise one after another. 8 seconds, 16:9.",
         "Several colorful hot air balloons being inflated on a field at dawn, with people standing around them."),
        ("the boxer throws a slow-motion jab at the camera",
         "A female boxer in red gloves in a fighting stance inside a gym ring, sweat on her forehead."),
        ("she flips the pancake in the pan and catches it",
         "A woman in pajamas standing at a stove holding a frying pan with a pancake in it, morning light from a window."),
        ("make the windmill blades turn slowly and the tulips sway",
         "A traditional Dutch windmill behind a field of red and yellow tulips under a blue sky."),
        ("zoom slowly into the snow globe until we are inside the little village",
         "A snow globe with a tiny village inside sitting on a wooden mantel next to a candle."),
        ("add drifting fog and have the tram headlights come toward the camera",
         "An old tram stopped on tracks in an empty street at night, its headlights on."),
        ("bring the kid's crayon drawing to life, the sun spins and the stick dog runs across the page",
         "A child's crayon drawing on white paper of a house, a big yellow sun and a stick-figure dog."),
        ("the barista pours latte art, focus on the cup, slow",
         "A barista holding a metal milk pitcher over a cup of espresso at a wooden counter."),
        ("make the koi swim in slow circles and some petals land on the water",
         "Top view of a garden pond with orange and white koi and a few floating cherry petals."),
        ("gentle breathing motion on the sleeping fox, snow falling",
         "A red fox sleeping curled up in the snow with its tail over its nose."),
        ("pan up from the street musician to the apartment windows where people are listening",
         "A man playing a cello on a sidewalk below an old apartment building with open windows."),
        ("Camera slowly orbits the sculpture while the light shifts from morning to evening.",
         "A large abstract steel sculpture in an empty plaza surrounded by low buildings."),
        ("make the candles on the cake flicker, then the kids lean in to blow them out",
         "Three kids in party hats around a table with a birthday cake with lit candles."),
        ("rain starts and the man opens his umbrella",
         "A man in a gray overcoat holding a closed black umbrella, standing on a city sidewalk under a cloudy sky."),
    ],
    "text-to-image": [
        ("a cozy little reading corner inside a hollow tree, tiny lamps, rain outside, storybook illustration", None),
        ("Book cover for a mystery novel called \"The Salt House\", a lone house on a cliff, stormy sea, minimal typography", None),
        ("isometric pixel art of a ramen shop with a cat sleeping on the counter", None),
        ("a fox wearing a yellow raincoat standing at a bus stop in the rain, watercolor, gentle", None),
        ("macro photo of a ladybug on a dew-covered blade of grass, sunrise bokeh", None),
        ("Create an infographic-style illustration showing the water cycle for a 4th grade classroom, bright and simple", None),
        ("flat lay of a hiking trip: map, compass, trail mix, wool socks, old camera, on weathered wood", None),
        ("retro 1950s advertisement of a robot vacuum, smiling housewife replaced by a smiling grandpa, pastel colors", None),
        ("A woman in a yellow dress standing alone in an enormous empty museum hall, tiny figure, huge space, symmetrical", None),
        ("cat sitting on a windowsill looking at the snow, photo, cozy, 4:5", None),
        ("Make me a poster for a community garden open day on Saturday, with vegetables, sunshine, and the words \"Grow Together\"", None),
        ("desktop wallpaper, dark minimal mountains, thin crescent moon, gradient sky, 16:9", None),
        ("my grandparents' farm but it's in the clouds, like floating, fields hanging off the edge, dreamy painting", None),
        ("a tarot card called The Gardener, art nouveau frame, woman holding seedlings, gold details", None),
        ("photorealistic red panda eating a dumpling with chopsticks", None),
        ("blueprint style technical drawing of a steam-powered bicycle", None),
        ("knolling photo of everything inside a vintage camera bag", None),
        ("Three friends on a rooftop at night sharing pizza, city lights behind, shot like a candid film photo", None),
        ("coloring page for kids: a dinosaur having a tea party, thick clean lines, no shading", None),
        ("surreal: a staircase going up into a giant teacup in the sky, pastel clouds", None),
    ],
    "image-to-image": [
        ("make it look like a vintage postcard from the 60s with faded colors and a white border",
         "A beach boardwalk with a carousel and people walking, on a sunny day."),
        ("remove the tourists, keep only the fountain and the buildings",
         "A crowded square with a baroque fountain in the middle and tourists taking photos around it."),
        ("add a big friendly dragon sleeping on the roof",
         "A small stone cottage with a thatched roof in a green valley."),
        ("turn the lights on in all the windows and make the sky deep blue",
         "An apartment block photographed at dusk with most windows dark."),
        ("change the sofa to mustard velvet and add a round rug",
         "A bright living room with a gray sofa, wooden floor and a large window."),
        ("make the cake chocolate instead of vanilla, and write Happy 40th Marta on it",
         "A round white frosted cake on a cake stand on a kitchen counter."),
        ("put snow on the mountains only, keep the lake summer",
         "A blue lake with green forest and bare rocky mountains behind it on a summer day."),
        ("swap my glasses for contacts basically, remove the glasses",
         "A selfie of a young man with thick black-framed glasses smiling in a car."),
        ("make the dog wear a tiny graduation cap",
         "A corgi sitting on grass in front of a brick university building."),
        ("Recolor the bike to matte black and add a wicker basket on the front.",
         "A red city bicycle leaning against a white wall."),
        ("turn the empty lot into a small park with benches and trees",
         "An empty gravel lot between two brick buildings with a chain-link fence."),
        ("make it look like it was shot on expired film, light leaks, grain",
         "Two friends laughing on a bench at a train station."),
        ("clean up the desk: remove the cables, the cups and the papers",
         "A cluttered desk with a monitor, tangled cables, several empty cups and scattered papers."),
        ("give the house a fresh coat of pale blue paint and white window trim",
         "A two-story wooden house with peeling gray paint and a porch."),
        ("make it a night market, stalls lit with lanterns, lots of people",
         "An empty parking lot next to a river during the day."),
        ("turn him into a pixar-ish 3D cartoon character, keep the outfit",
         "A middle-aged man in a Hawaiian shirt holding a fishing rod on a pier."),
        ("put the sneaker on a floating rock in the sky, clouds around",
         "A white high-top sneaker on a plain gray background."),
        ("make the flowers in the vase sunflowers instead of roses",
         "A glass vase with red roses on a dining table next to a window."),
        ("extend the image to the left so there's more beach, 16:9",
         "A square photo of a woman walking along a beach at sunset."),
        ("add autumn leaves falling and make the trees orange",
         "A tree-lined avenue in a park with green trees and a few joggers."),
    ],
    "chat": [
        ("I just moved into my first apartment and I have no idea what I actually need to buy for the kitchen. Give me a short essentials list.", None),
        ("My friend is going through a divorce. What are some things I can say or do that actually help?", None),
        ("how do people make friends after 30 lol genuinely asking", None),
        ("What should I look for when buying a used bike?", None),
        ("Can you explain what a 401(k) match is and why people say not to leave it on the table?", None),
        ("I'm hosting Thanksgiving for the first time for 12 people. How do I plan the timing so everything is hot at once?", None),
        ("Is it rude to bring a plus-one to a wedding if the invite doesn't say I can?", None),
        ("My cat suddenly started peeing outside the litter box. What could be going on?", None),
        ("Give me a simple weekly cleaning schedule for a two-bedroom apartment shared by two busy people.", None),
        ("What are some good questions to ask at the end of a first date to keep the conversation going?", None),
        ("Tell me a fun fact about octopuses that most people don't know.", None),
        ("I have a 10 minute speech at my dad's retirement party. Can you help me outline it? He was a firefighter for 32 years.", None),
        ("how do i politely tell someone their breath smells", None),
        ("What's a good way to explain to a 6-year-old why we can't get a puppy right now?", None),
        ("Write a short, funny out-of-office reply for someone going on a two-week honeymoon.", None),
        ("Is it better to pay off my car loan early or put the extra money into savings? Loan is at 4.9%.", None),
    ],
    "code": [
        ("Why does this Python loop skip elements?\n\n```python\nitems = [1, 2, 2, 3, 4]\nfor x in items:\n    if x == 2:\n        items.remove(x)\nprint(items)\n```", None),
        ("This prints `undefined` after one second instead of the name. Why?\n\n```js\nconst user = {\n  name: 'Rosa',\n  greetLater() {\n    setTimeout(function () {\n      console.log(this.name);\n    }, 1000);\n  }\n};\nuser.greetLater();\n```", None),
        ("My Go program panics with 'assignment to entry in nil map'. What am I doing wrong?\n\n```go\nvar counts map[string]int\nfor _, w := range words {\n    counts[w]++\n}\n```", None),
        ("Rust won't compile this, something about borrowing twice. How do I fix it?\n\n```rust\nlet mut v = vec![1, 2, 3];\nlet first = &mut v[0];\nlet second = &mut v[1];\n*first += *second;\n```", None),
        ("Why is this Java comparison false even though both strings are \"hello\"?\n\n```java\nString a = new String(\"hello\");\nString b = \"hello\";\nSystem.out.println(a == b);\n```", None),
        ("There's an off-by-one somewhere here and valgrind is yelling at me:\n\n```c\nint *copy(const int *src, int n) {\n    int *dst = malloc(n * sizeof(int));\n    for (int i = 0; i <= n; i++) dst[i] = src[i];\n    return dst;\n}\n```", None),
        ("Why does this SQL return no rows even though some users were deleted?\n\n```sql\nSELECT id FROM users WHERE deleted_at = NULL;\n```", None),
        ("The function returns before all the saves finish. Why doesn't await work here?\n\n```js\nasync function saveAll(items) {\n  items.forEach(async (item) => {\n    await db.save(item);\n  });\n  console.log('done');\n}\n```", None),
        ("All of these print 4. I expected 0 1 2 3 4?? \n\n```python\nfns = [lambda: i for i in range(5)]\nprint([f() for f in fns])\n```", None),
        ("This C++ crashes sometimes when I erase while iterating:\n\n```cpp\nfor (auto it = v.begin(); it != v.end(); ++it) {\n    if (*it % 2 == 0) v.erase(it);\n}\n```", None),
        ("bash says `command not found` on line 2:\n\n```bash\n#!/bin/bash\nNAME = \"world\"\necho \"hello $NAME\"\n```", None),
        ("Write a tiny Flask app with one endpoint that returns the current server time as JSON.", None),
        ("Convert this callback-style Node function to return a Promise:\n\n```js\nfunction readConfig(path, cb) {\n  fs.readFile(path, 'utf8', (err, text) => {\n    if (err) return cb(err);\n    cb(null, JSON.parse(text));\n  });\n}\n```", None),
        ("what's a decorator in python and can you show one that logs how long a function took", None),
        ("Write a Dockerfile for a small Python web app that uses a requirements.txt and runs with gunicorn on port 8000.", None),
        ("Give me a minimal GitHub Actions workflow that runs pytest on every push for Python 3.11 and 3.12.", None),
    ],
    "stem": [
        ("Why can't we just fire nuclear waste into the Sun?", None),
        ("How do bees see the world differently from us, especially colors?", None),
        ("What actually happens in the brain when we fall asleep?", None),
        ("If the universe is expanding, what is it expanding into? Explain the usual answer.", None),
        ("How do airplane wings generate lift? I've heard the equal transit time explanation is wrong.", None),
        ("Why is it hard to make batteries that charge in a minute?", None),
        ("What is a prion and why are prion diseases so hard to treat?", None),
        ("How does a search engine decide which pages to show first, at a high level?", None),
        ("Explain Simpson's paradox with a simple made-up example about two hospitals.", None),
        ("Why do we need both red and white blood cells? What does each one do?", None),
        ("How do solar panels turn sunlight into electricity?", None),
        ("What does it mean that a sorting algorithm is stable, and when does it matter?", None),
        ("Why does the pressure in a car tire drop on a cold morning? Use the gas laws.", None),
        ("How did Eratosthenes measure the circumference of the Earth?", None),
        ("What's the difference between a gene and an allele, with eye color as the example?", None),
    ],
    "math": [
        ("If I fold a sheet of paper 0.1 mm thick in half 30 times, how thick would it be? Just the math, ignore that it's impossible.", None),
        ("A snail climbs 3 m up a 10 m well each day and slips back 2 m each night. On which day does it get out?", None),
        ("Prove that the square root of 2 is irrational.", None),
        ("What is 17% of 340, and how would I do it in my head?", None),
        ("Show that the sum of any three consecutive integers is divisible by 3.", None),
        ("A pizza place offers 8 toppings. How many different pizzas with exactly 3 different toppings are possible?", None),
        ("If a test has 10 true/false questions and I guess all of them, what's the probability I get at least 8 right?", None),
        ("Find the equation of the line through (2, 5) that is perpendicular to y = 3x - 1.", None),
        ("How many handshakes happen if 25 people at a party each shake hands with everyone else exactly once?", None),
        ("What's the expected number of coin flips to get two heads in a row?", None),
        ("Simplify (x^2 - 9) / (x^2 + 6x + 9).", None),
        ("A store raises a price by 20% and later lowers it by 20%. Is it back to the original price? Explain.", None),
        ("Find the limit of (sin 3x) / x as x approaches 0.", None),
        ("How many zeros are at the end of 125 factorial?", None),
        ("My car loan is $18,000 at 6% APR for 5 years. What's the monthly payment? Show the formula.", None),
    ],
}


# --------------------------------------------------------------------------------------------------------------
# Assembly
# --------------------------------------------------------------------------------------------------------------

def plain(fn: Callable[[Gen], str]) -> Callable[[Gen], tuple[str, None]]:
    return lambda g: (fn(g), None)


FAMILIES: dict[str, list[tuple[float, Callable[[Gen], tuple[str, str | None]]]]] = {
    "text-to-video": [(0.24, plain(t2v_cinematic)), (0.2, plain(t2v_character)), (0.18, plain(t2v_nature)),
                      (0.16, plain(t2v_terse)), (0.12, plain(t2v_rambling)), (0.1, plain(t2v_whimsical))],
    "image-to-video": [(1.0, i2v_row)],
    "text-to-image": [(0.2, plain(t2i_product)), (0.18, plain(t2i_anime)), (0.18, plain(t2i_portrait)),
                      (0.14, plain(t2i_architecture)), (0.14, plain(t2i_terse)), (0.16, plain(t2i_misc))],
    "image-to-image": [(1.0, i2i_row)],
    "chat": [(1.0, plain(chat_row))],
    "code": [(1.0, plain(code_row))],
    "stem": [(1.0, plain(stem_row))],
    "math": [(1.0, plain(math_row))],
}


def load_benchmarks() -> tuple[list[str], list[str]]:
    prompts, captions = [], []
    for name in BENCHMARKS:
        for line in (DATA / name).read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            row = json.loads(line)
            prompts.append(row["prompt"])
            prompts.extend(row.get("turns") or [])
            if row.get("image_caption"):
                captions.append(row["image_caption"])
    return prompts, captions


def build(seed: int = SEED) -> tuple[list[dict], Guard]:
    g = Gen(seed)
    guard = Guard(*load_benchmarks())
    rows: list[dict] = []
    for category, target in TARGETS.items():
        picked: list[tuple[str, str | None]] = []
        for prompt, caption in HANDWRITTEN[category]:
            if guard.check(prompt, caption):
                picked.append((prompt, caption))
            else:
                print(f"warning: dropped hand-written {category} row: {prompt[:60]!r}", file=sys.stderr)
        attempts = 0
        while len(picked) < target:
            attempts += 1
            if attempts > 100 * target:
                raise SystemExit(f"could not fill {category}: {len(picked)}/{target} after {attempts} attempts")
            prompt, caption = weighted(g, FAMILIES[category])(g)
            if guard.check(prompt, caption):
                picked.append((prompt, caption))
        rows.extend({"category": category, "prompt": p, "image_caption": c} for p, c in picked)
    g.r.shuffle(rows)
    # the second round's rows come after the first round's, so that those keep their ids (regenerated
    # responses and feature caches are keyed by id)
    for category, prompt, caption in read_extra(EXTRA):
        if guard.check(prompt, caption):
            rows.append({"category": category, "prompt": prompt, "image_caption": caption})
        else:
            print(f"warning: dropped extra {category} row: {prompt[:60]!r}", file=sys.stderr)
    return [{"id": f"tp-{i:05d}", **row} for i, row in enumerate(rows, 1)], guard


def read_extra(path: Path) -> list[tuple[str, str, str | None]]:
    """(category, prompt, caption) rows of a hand-written JSONL; image-* rows need the input image's caption."""
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        row = json.loads(line)
        category, prompt, caption = row.get("category"), row.get("prompt"), row.get("image_caption")
        if category not in TARGETS or not isinstance(prompt, str) or \
                bool(caption) != category.startswith("image-"):
            raise SystemExit(f"{path.name}:{n}: needs a known category, a prompt, and an image_caption exactly "
                             "for image-* rows")
        out.append((category, prompt, caption))
    return out


def main() -> None:
    rows, guard = build()
    with OUT.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    counts = Counter(row["category"] for row in rows)
    print(f"wrote {len(rows)} rows to {OUT.relative_to(DATA.parent)}")
    for category in TARGETS:
        print(f"  {category:15s} {counts[category]}")
    print("rejected candidates: " + (", ".join(f"{k}={v}" for k, v in sorted(guard.rejected.items())) or "none"))


if __name__ == "__main__":
    main()
