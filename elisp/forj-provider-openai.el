;;; forj-provider-openai.el --- OpenAI-compatible chat completions  -*- lexical-binding: t; -*-

;; Copyright (C) 2026 The forj authors

;; This program is free software; you can redistribute it and/or modify
;; it under the terms of the GNU General Public License as published by
;; the Free Software Foundation, either version 3 of the License, or
;; (at your option) any later version.

;; This program is distributed in the hope that it will be useful,
;; but WITHOUT ANY WARRANTY; without even the implied warranty of
;; MERCHANTABILITY or FITNESS FOR A PARTICULAR PURPOSE.  See the
;; GNU General Public License for more details.

;; You should have received a copy of the GNU General Public License
;; along with this program.  If not, see <https://www.gnu.org/licenses/>.

;;; Commentary:

;; The `openai' family: the chat completions API with "stream": true, as
;; served by OpenAI and by the servers that copy it (Ollama, llama.cpp's
;; server, vLLM, OpenRouter).  Events are `data: {json}' lines ending
;; with `data: [DONE]'; text arrives in choices[0].delta.content, native
;; function calls in choices[0].delta.tool_calls, their arguments in
;; pieces keyed by index.  A refusal arrives in delta.refusal; the
;; finish_reason "length" means the token limit cut the reply (a call
;; whose arguments were cut is reported as cut, not as a call), and
;; "content_filter" that the provider's filter stopped it.

;;; Code:

(require 'cl-lib)
(require 'forj-provider)
(require 'forj-usage)

(defun forj-provider-openai--id (id)
  "ID as OpenAI takes it: at most 40 characters.
Ids of other providers can be longer."
  (forj-provider-safe-id id "\\`[!-~]+\\'" 40))

(defun forj-provider-openai--messages (system messages)
  "SYSTEM and MESSAGES as chat completions messages."
  (vconcat
   (list (list :role "system" :content system))
   (cl-loop
    for message in messages
    append
    (pcase (plist-get message :role)
      ("user" (list (list :role "user" :content (forj-provider-openai--user-content message))))
      ("assistant"
       (list (append (list :role "assistant" :content (or (plist-get message :text) ""))
                     (when (plist-get message :calls)
                       (list :tool_calls
                             (vconcat
                              (mapcar (lambda (call)
                                        (list :id (forj-provider-openai--id (plist-get call :id))
                                              :type "function"
                                              :function (list :name (plist-get call :name)
                                                              :arguments (forj-provider-json-encode
                                                                          (or (plist-get call :args)
                                                                              (make-hash-table))))))
                                      (plist-get message :calls))))))))
      ("tool"
       (mapcar (lambda (result)
                 (list :role "tool" :tool_call_id (forj-provider-openai--id (plist-get result :id))
                       :content (plist-get result :content)))
               (plist-get message :results)))))))

(defun forj-provider-openai--request (provider system messages tools)
  "The chat completions request for PROVIDER with SYSTEM, MESSAGES and TOOLS."
  (list :url (concat (string-remove-suffix "/" (plist-get provider :url)) "/chat/completions")
        :headers nil
        :secret-headers (and (plist-get provider :key)
                             (list (concat "Authorization: Bearer " (plist-get provider :key))))
        :body (forj-provider-json-encode
               (append (list :model (plist-get provider :model)
                             :stream t
                             :messages (forj-provider-openai--messages system messages))
                       (unless (plist-get provider :no-stream-usage)
                         (list :stream_options (list :include_usage t)))
                       (when (plist-get provider :max-tokens)
                         ;; OpenAI's reasoning models refuse max_tokens.
                         (list (if (equal (forj-provider-host (plist-get provider :url)) "api.openai.com")
                                   :max_completion_tokens
                                 :max_tokens)
                               (plist-get provider :max-tokens)))
                       (when tools
                         (list :tools
                               (vconcat
                                (mapcar (lambda (tool)
                                          (list :type "function"
                                                :function (list :name (plist-get tool :name)
                                                                :description (plist-get tool :description)
                                                                :parameters (plist-get tool :parameters))))
                                        tools))))))))

(defun forj-provider-openai--flush-calls (stream &optional cut)
  "Return a :call action for each function call gathered in STREAM.
CUT non-nil: the token limit cut the reply, and the last call is left
out when its arguments are not whole JSON; its name is kept in the
state as :cut-call."
  (let* ((calls (sort (copy-sequence (forj-provider-state stream :calls))
                      (lambda (a b) (< (car a) (car b)))))
         (last (cdr (car (last calls)))))
    (when (and cut last (stringp (forj-provider-parse-args (plist-get last :arguments))))
      (forj-provider-set-state stream :cut-call (or (plist-get last :name) "a function"))
      (setq calls (butlast calls)))
    (forj-provider-set-state stream :calls nil)
    (mapcar (lambda (entry)
              (let ((call (cdr entry)))
                ;; A server that sends no id (llama.cpp, some Ollama models)
                ;; gets one made up, unique across the conversation.
                (list :call (list :id (or (plist-get call :id) (forj-provider-new-id "call"))
                                  :name (or (plist-get call :name) "")
                                  :args (forj-provider-parse-args (plist-get call :arguments))))))
            calls)))

(defun forj-provider-openai--stop (stream finish)
  "The :stop action for STREAM's FINISH reason, or nil for a normal end."
  (let ((refusal (forj-provider-state stream :refusal)))
    (cond
     ((equal finish "length")
      (list :stop (append (list :kind 'length :reason "finish_reason \"length\"")
                          (let ((cut (forj-provider-state stream :cut-call)))
                            (and cut (list :cut-call cut))))))
     ((and refusal (not (string-empty-p refusal)))
      (list :stop (list :kind 'refusal :reason (string-trim refusal))))
     ((equal finish "content_filter")
      (list :stop (list :kind 'refusal
                        :reason "finish_reason \"content_filter\": the provider's content filter stopped the reply"))))))

(defun forj-provider-openai--gather (stream piece)
  "Add PIECE, one tool call fragment of a delta, to what STREAM has gathered.
A piece without an index (some servers send each call whole without
one) that names a function starts a new call when the last one has a
name already; else it continues the last one."
  (let* ((calls (forj-provider-state stream :calls))
         (last (and calls (apply #'max (mapcar #'car calls))))
         (index (cond ((integerp (plist-get piece :index)) (plist-get piece :index))
                      ((null last) 0)
                      ((and (let ((name (plist-get (plist-get piece :function) :name)))
                              (and (stringp name) (not (string-empty-p name))))
                            (plist-get (alist-get last calls) :name))
                       (1+ last))
                      (t last)))
         (known (alist-get index calls))
         (function (plist-get piece :function))
         (text (lambda (value) (and (stringp value) (not (string-empty-p value)) value))))
    (forj-provider-set-state
     stream :calls
     (cons (cons index
                 (list :id (or (funcall text (plist-get piece :id)) (plist-get known :id))
                       :name (or (funcall text (plist-get function :name)) (plist-get known :name))
                       :arguments (concat (plist-get known :arguments)
                                          (funcall text (plist-get function :arguments)))))
           (assq-delete-all index (copy-alist calls))))))

(defun forj-provider-openai--event (stream _event data)
  "Turn one event's DATA of STREAM into actions."
  (if (equal (string-trim data) "[DONE]")
      (append (forj-provider-openai--flush-calls stream) (list (list :done)))
    (let* ((json (forj-provider-json data))
           (choice (let ((choices (plist-get json :choices)))
                     (and (vectorp choices) (> (length choices) 0) (aref choices 0))))
           (delta (plist-get choice :delta))
           (actions nil))
      ;; vLLM reports a failure as {"object": "error", "message": ...}.
      (when (or (plist-get json :error) (equal (plist-get json :object) "error"))
        (push (list :error (forj-provider-reported-error data)) actions))
      (let ((content (plist-get delta :content)))
        (when (stringp content) (push (list :text content) actions)))
      (let ((refusal (plist-get delta :refusal)))
        (when (stringp refusal)
          (forj-provider-set-state stream :refusal
                                   (concat (forj-provider-state stream :refusal) refusal))))
      (let ((pieces (plist-get delta :tool_calls)))
        (when (vectorp pieces)
          (cl-loop for piece across pieces
                   do (forj-provider-openai--gather stream piece))))
      (let ((finish (plist-get choice :finish_reason)))
        (when (stringp finish)
          (setq actions (append (reverse (forj-provider-openai--flush-calls
                                          stream (equal finish "length")))
                                actions))
          (let ((stop (forj-provider-openai--stop stream finish)))
            (when stop (push stop actions)))
          (push (list :done) actions)))
      (nreverse actions))))

(defun forj-provider-openai--user-content (message)
  "The content of the user MESSAGE: its text, after its context as text parts.
Chat completions take documents only as PDF files, so each piece of
context is a text part that names its source."
  (let ((context (plist-get message :context)))
    (if (null context)
        (plist-get message :text)
      (vconcat (mapcar (lambda (item)
                         (list :type "text"
                               :text (format "<context source=\"%s\">\n%s\n</context>"
                                             (plist-get item :title) (plist-get item :text))))
                       context)
               (list (list :type "text" :text (plist-get message :text)))))))

(defun forj-provider-openai--usage (data)
  "The usage action of an event's DATA, when it is the chunk that carries it.
With stream_options.include_usage the last chunk before [DONE] has
\"usage\" and no choices; prompt_tokens counts the cached tokens too."
  (when (string-match-p "\"usage\"" data)
    (let ((usage (plist-get (ignore-errors (forj-provider-json data)) :usage)))
      (when (consp usage)
        (let ((number (lambda (v) (if (numberp v) v 0))))
          (list (list :usage
                      (forj-usage-make
                       :input (funcall number (plist-get usage :prompt_tokens))
                       :output (funcall number (plist-get usage :completion_tokens))
                       :cache-read (funcall number (plist-get (plist-get usage :prompt_tokens_details)
                                                              :cached_tokens))
                       :input-includes-cache t))))))))

(defun forj-provider-openai--event-and-usage (stream event data)
  "The actions of STREAM's EVENT with DATA, the reply's usage included."
  (append (forj-provider-openai--event stream event data)
          (forj-provider-openai--usage data)))

(forj-provider-register-family
 'openai
 :request #'forj-provider-openai--request
 :event #'forj-provider-openai--event-and-usage
 :error-message #'forj-provider-error-message)

(provide 'forj-provider-openai)
;;; forj-provider-openai.el ends here
