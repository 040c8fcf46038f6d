"""General vocabulary the tiny tokenizer learns merges for, like any real LLM tokenizer.

The BPE is trained on the synthetic pretraining corpus plus these words, repeated, so that
everyday English words, units and the world's large cities are one or two tokens instead of
single letters. The tiny model is never *trained* on this text; it only shapes the vocabulary.
"""

ENGLISH = """
the of and to in is you that it he was for on are as with his they at be this have from or one
had by word but not what all were we when your can said there use an each which she do how their
if will up other about out many then them these so some her would make like him into time has
look two more write go see number no way could people my than first water been call who oil its
now find long down day did get come made may part hello thanks please sure here okay yes answer
question help result data value name today tomorrow yesterday now right current currently city
cities country town place weather temperature degrees celsius fahrenheit warm warmer warmest
cold colder coldest hot hotter hottest cool mild sunny cloudy rainy snowy windy foggy sun sunshine
cloud clouds rain raining snow snowing wind fog storm humid dry clear overcast forecast local
time clock hour minute morning evening night which where when what why tell me is it in or and
compare comparison than both between among of the most least more less high low higher lower
price stock book flight score rating balance order movie song team recipe car hotel device course
package album player product station market account ticket email meeting calendar schedule
send draft message reply subject participant slot free busy zone timezone convert conversion
search filter size colour color add cart checkout buy item view total number sum difference
product multiply divide plus minus equals result answer code python print function tool tools
"""

CITIES = """
Paris London Berlin Madrid Rome Lisbon Dublin Vienna Prague Warsaw Athens Oslo Stockholm Helsinki
Copenhagen Amsterdam Zurich Geneva Brussels Budapest Bucharest Sofia Belgrade Kyiv Moscow Istanbul
Cairo Nairobi Lagos Accra Casablanca Tunis Johannesburg Cape Town Addis Ababa Dubai Doha Riyadh
Tehran Baghdad Tel Aviv Karachi Lahore New Delhi Mumbai Bangalore Chennai Kolkata Dhaka Colombo
Kathmandu Bangkok Hanoi Singapore Kuala Lumpur Jakarta Manila Hong Kong Taipei Beijing Shanghai
Shenzhen Seoul Busan Tokyo Osaka Sydney Melbourne Brisbane Perth Auckland Wellington New York
Los Angeles San Francisco Chicago Boston Seattle Miami Houston Dallas Denver Atlanta Toronto
Vancouver Montreal Mexico City Bogota Lima Santiago Buenos Aires Sao Paulo Rio de Janeiro Havana
Caracas Quito Reykjavik Edinburgh Manchester Munich Hamburg Milan Barcelona Seville Porto Lyon
"""

#: How often the vocabulary text is repeated in the BPE training data.
REPEATS = 40


def vocabulary_texts() -> list[str]:
    """The general-vocabulary texts to add to the BPE training data."""
    words = ENGLISH.split() + CITIES.split()
    # the surface forms words take in prose, JSON keys / values and snake_case names
    forms = " ".join(words) + "\n" + " ".join(f'{{"{w}": "{w}"}} get_{w}' for w in words)
    numbers = " ".join(f"{n} {n}°C" for n in range(-30, 120))  # common numbers: one token each
    return [forms] * REPEATS + ["°C °F -5°C 21°C 70°F"] * REPEATS + [numbers] * (4 * REPEATS)
