/*
 * The ring's state for people (issue 15, docs/server.md "The ring"):
 *
 *   GET /v1/ring  the session's JSON picture (lares_session_ring_json): the
 *                 plan, each device's state, windows and figures, re-plans
 *                 and failovers; 404 when this server is not a ring's head
 *   GET /ring     a page that draws it and refreshes every second: the devices
 *                 around a circle in ring order, coloured by state, with their
 *                 layers and measured against predicted ms per token, and a
 *                 table of every figure. Everything is in this file (no
 *                 external assets); the page sends the key it finds in its
 *                 address's fragment (/ring#key=KEY) when the server has one.
 */
#include "server/ring_page.h"

#include <stdlib.h>
#include <string.h>

static const char ring_page_html[] =
    "<!DOCTYPE html>\n"
    "<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
    "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
    "<title>lares ring</title>\n"
    "<style>\n"
    "body{font:14px system-ui,sans-serif;margin:16px;color:#222;background:#fafafa}\n"
    "h1{font-size:20px;margin:0 0 8px}\n"
    "#summary{margin:4px 0 12px}\n"
    "#picture{background:#fff;border:1px solid #ddd;border-radius:6px}\n"
    "table{border-collapse:collapse;margin-top:12px;background:#fff}\n"
    "th,td{border:1px solid #ddd;padding:3px 8px;text-align:right}\n"
    "th:first-child,td:first-child,td.t{text-align:left}\n"
    "#switch{margin-top:10px;font-size:12px;color:#444;max-width:1000px}\n"
    "#error{color:#b00020}\n"
    ".legend span{display:inline-block;margin-right:12px}\n"
    ".legend i{display:inline-block;width:10px;height:10px;border-radius:5px;margin-right:4px}\n"
    "</style></head><body>\n"
    "<h1>lares ring</h1>\n"
    "<div id=\"error\"></div>\n"
    "<div id=\"summary\">waiting for the ring&hellip;</div>\n"
    "<svg id=\"picture\" width=\"640\" height=\"440\" viewBox=\"0 0 640 440\" "
    "role=\"img\" aria-label=\"the devices of the ring\"></svg>\n"
    "<div class=\"legend\" id=\"legend\"></div>\n"
    "<table id=\"devices\"><thead><tr><th>device</th><th>address</th><th>state</th>"
    "<th>layers</th><th>windows</th><th>measured ms/token</th><th>predicted ms/token</th>"
    "<th>free MiB</th><th>disk wait ms</th><th>hop rtt ms</th><th>why</th></tr></thead>"
    "<tbody></tbody></table>\n"
    "<div id=\"switch\"></div>\n"
    "<script>\n"
    "'use strict';\n"
    "const COLORS={'serving':'#2e7d32','left out':'#9e9e9e','joining':'#1565c0',"
    "'rejoining':'#1565c0','suspect':'#ef6c00','lost':'#c62828'};\n"
    "const SVG='http://www.w3.org/2000/svg';\n"
    "function el(tag,attrs,text){const e=document.createElementNS(SVG,tag);"
    "for(const k in attrs)e.setAttribute(k,attrs[k]);if(text!==undefined)e.textContent=text;"
    "return e;}\n"
    "function ms(v){return v===null||v===undefined?'-':v.toFixed(2);}\n"
    "function windows(d){return d.windows.map(w=>w[0]+'-'+(w[1]-1)).join(', ')||'-';}\n"
    "function draw(r){\n"
    " const svg=document.getElementById('picture');\n"
    " while(svg.firstChild)svg.removeChild(svg.firstChild);\n"
    " const n=r.devices.length,cx=320,cy=220,R=n>1?160:0;\n"
    " const at=i=>[cx+R*Math.sin(2*Math.PI*i/n),cy-R*Math.cos(2*Math.PI*i/n)];\n"
    " const ring=r.devices.map((d,i)=>[d,i]).filter(x=>x[0].in_ring);\n"
    " for(let j=0;j<ring.length&&ring.length>1;j++){\n"
    "  const a=at(ring[j][1]),b=at(ring[(j+1)%ring.length][1]);\n"
    "  svg.appendChild(el('line',{x1:a[0],y1:a[1],x2:b[0],y2:b[1],stroke:'#90a4ae',"
    "'stroke-width':3,'class':'hop'}));\n"
    " }\n"
    " svg.appendChild(el('text',{x:cx,y:cy-8,'text-anchor':'middle','font-size':15,"
    "'class':'center'},r.devices_in_plan+' of '+r.n_config+' devices, k = '+r.rounds));\n"
    " svg.appendChild(el('text',{x:cx,y:cy+12,'text-anchor':'middle','font-size':13},"
    "'failovers '+r.failovers+', re-plans '+r.replans));\n"
    " r.devices.forEach((d,i)=>{\n"
    "  const p=at(i),g=el('g',{'class':'device','data-name':d.name,'data-state':d.state,"
    "'data-layers':d.layers});\n"
    "  g.appendChild(el('circle',{cx:p[0],cy:p[1],r:34,fill:COLORS[d.state]||'#555',"
    "stroke:'#fff','stroke-width':3}));\n"
    "  g.appendChild(el('text',{x:p[0],y:p[1]-4,'text-anchor':'middle',fill:'#fff',"
    "'font-weight':'bold','font-size':13},d.name));\n"
    "  g.appendChild(el('text',{x:p[0],y:p[1]+13,'text-anchor':'middle',fill:'#fff',"
    "'font-size':11},d.layers+' layer'+(d.layers===1?'':'s')));\n"
    "  g.appendChild(el('text',{x:p[0],y:p[1]+52,'text-anchor':'middle','font-size':11},"
    "d.state+' \\u00b7 '+ms(d.measured_token_ms)+' / '+ms(d.predicted_token_ms)+' ms'));\n"
    "  svg.appendChild(g);\n"
    " });\n"
    "}\n"
    "function table(r){\n"
    " const tb=document.querySelector('#devices tbody');\n"
    " while(tb.firstChild)tb.removeChild(tb.firstChild);\n"
    " for(const d of r.devices){\n"
    "  const tr=document.createElement('tr');tr.className='device';tr.dataset.name=d.name;\n"
    "  const cells=[d.name,d.address||'(head)',d.state,d.layers,windows(d),"
    "ms(d.measured_token_ms),ms(d.predicted_token_ms),d.mem_free_mib===null?'-':d.mem_free_mib,"
    "d.disk_wait_ms.toFixed(1),ms(d.hop_rtt_ms),d.why||''];\n"
    "  cells.forEach((c,k)=>{const td=document.createElement('td');td.textContent=String(c);"
    "if(k===1||k===2||k===10)td.className='t';tr.appendChild(td);});\n"
    "  tb.appendChild(tr);\n"
    " }\n"
    "}\n"
    "function legend(){const l=document.getElementById('legend');"
    "for(const s in COLORS){if(s==='rejoining')continue;const sp=document.createElement('span');"
    "const i=document.createElement('i');i.style.background=COLORS[s];sp.appendChild(i);"
    "sp.appendChild(document.createTextNode(s==='joining'?'joining / rejoining':s));"
    "l.appendChild(sp);}}\n"
    "async function refresh(){\n"
    " const m=/key=([^&]*)/.exec(location.hash);\n"
    " const h=m?{'Authorization':'Bearer '+decodeURIComponent(m[1])}:{};\n"
    " const err=document.getElementById('error');\n"
    " try{\n"
    "  const res=await fetch('/v1/ring',{headers:h,cache:'no-store'});\n"
    "  const body=await res.json();\n"
    "  if(!res.ok){err.textContent=(body.error&&body.error.message)||('HTTP '+res.status);"
    "return;}\n"
    "  err.textContent='';\n"
    "  document.getElementById('summary').textContent=body.devices_in_plan+' of '+"
    "body.n_config+' devices serve '+body.n_layer+' layers in '+body.rounds+' round(s) of '+"
    "body.width+', placement '+body.placement+', predicted '+ms(body.predicted_token_ms)+"
    "' ms/token; failovers '+body.failovers+', re-plans '+body.replans+', KV mirroring '+"
    "(body.kv_mirror?'on':'off')+', '+body.positions+' positions in the KV cache';\n"
    "  draw(body);table(body);\n"
    "  document.getElementById('switch').textContent=body.last_switch?"
    "'last plan change: '+body.last_switch:'no plan change yet';\n"
    "  document.body.dataset.updated=String(body.updated_unix_ms);\n"
    " }catch(e){err.textContent='cannot reach /v1/ring: '+e;}\n"
    "}\n"
    "legend();refresh();setInterval(refresh,1000);\n"
    "</script></body></html>\n";

enum MHD_Result server_ring_json(server *sv, struct MHD_Connection *c) {
    char *j = lares_session_ring_json(sv->s);
    if (j == NULL) {
        server_error e;
        server_fail(&e, 404, "invalid_request_error", "not_a_ring", NULL,
                    "this server runs on one device, not as the head of a ring (serve --ring)");
        json_t *o = server_error_json(&e);
        char *s = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;
        json_decref(o);
        enum MHD_Result r =
            s != NULL ? server_send_text(sv, c, 404, "application/json", s, strlen(s)) : MHD_NO;
        free(s);
        return r;
    }
    enum MHD_Result r = server_send_text(sv, c, 200, "application/json", j, strlen(j));
    lares_free(j);
    return r;
}

enum MHD_Result server_ring_page(server *sv, struct MHD_Connection *c) {
    return server_send_text(sv, c, 200, "text/html; charset=utf-8", ring_page_html,
                            sizeof ring_page_html - 1);
}
