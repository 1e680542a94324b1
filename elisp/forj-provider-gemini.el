;;; forj-provider-gemini.el --- Google Gemini streamGenerateContent  -*- lexical-binding: t; -*-

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

;; The `gemini' family: models/MODEL:streamGenerateContent?alt=sse.
;; Every event is a whole GenerateContentResponse: text in
;; candidates[0].content.parts[].text, native calls whole in
;; parts[].functionCall; the last one carries a finishReason.  The key
;; travels in the x-goog-api-key header, never in the URL.
;;
;; A functionCall part may carry a thoughtSignature: it is kept with
;; the call (its :native) and sent back with it, unchanged, as Gemini 3
;; requires.  A call without an id gets one that is unique in the
;; conversation.
;;
;; finishReason MAX_TOKENS is a reply cut by the token limit; SAFETY,
;; RECITATION, BLOCKLIST, PROHIBITED_CONTENT, SPII and IMAGE_SAFETY are
;; refusals, shown with the safety categories that blocked; a prompt
;; blocked outright comes as promptFeedback.blockReason.

;;; Code:

(require 'cl-lib)
(require 'forj-provider)
(require 'forj-usage)

(defun forj-provider-gemini--contents (messages)
  "MESSAGES as Gemini contents.
A call Gemini gave an id goes back with that id, and so does its
result; calls that came without one go back without one."
  (vconcat
   (cl-loop
    with ids = nil                      ; forj's id -> Gemini's, of the calls before
    for message in messages
    do (dolist (call (plist-get message :calls))
         (let ((own (forj-provider-gemini--native call :id)))
           (when (stringp own) (push (cons (plist-get call :id) own) ids))))
    for parts = (pcase (plist-get message :role)
                  ("user" (append (mapcar (lambda (item)
                                            (list :text (format "<context source=\"%s\">\n%s\n</context>"
                                                                (plist-get item :title)
                                                                (plist-get item :text))))
                                          (plist-get message :context))
                                  (list (list :text (plist-get message :text)))))
                  ("assistant"
                   (append (unless (string-empty-p (or (plist-get message :text) ""))
                             (list (list :text (plist-get message :text))))
                           (mapcar (lambda (call)
                                     (append
                                      (list :functionCall
                                            (append
                                             (let ((own (forj-provider-gemini--native call :id)))
                                               (and (stringp own) (list :id own)))
                                             (list :name (plist-get call :name)
                                                   :args (let ((args (plist-get call :args)))
                                                           (if (or (null args) (stringp args))
                                                               (make-hash-table)
                                                             args)))))
                                      ;; Gemini 3 refuses a call of the turn sent back
                                      ;; without the signature it came with.
                                      (let ((signature (forj-provider-gemini--signature call)))
                                        (and signature (list :thoughtSignature signature)))))
                                   (plist-get message :calls))))
                  ("tool"
                   (mapcar (lambda (result)
                             (list :functionResponse
                                   (append
                                    (let ((own (cdr (assoc (plist-get result :id) ids))))
                                      (and own (list :id own)))
                                    (list :name (plist-get result :name)
                                          :response (list :content (plist-get result :content))))))
                           (plist-get message :results))))
    when parts
    collect (list :role (if (equal (plist-get message :role) "assistant") "model" "user")
                  :parts (vconcat parts)))))

(defun forj-provider-gemini--native (call key)
  "The value of KEY in what Gemini sent with CALL (its :native), or nil."
  (let ((native (plist-get call :native)))
    (and (consp native) (equal (plist-get native :family) "gemini")
         (plist-get native key))))

(defun forj-provider-gemini--signature (call)
  "The thoughtSignature Gemini sent with CALL, or nil."
  (let ((signature (forj-provider-gemini--native call :thoughtSignature)))
    (and (stringp signature) signature)))

(defun forj-provider-gemini--request (provider system messages tools)
  "The streamGenerateContent request for PROVIDER with SYSTEM, MESSAGES and TOOLS."
  (list :url (format "%s/models/%s:streamGenerateContent?alt=sse"
                     (string-remove-suffix "/" (plist-get provider :url))
                     (url-hexify-string (plist-get provider :model)))
        :headers nil
        :secret-headers (and (plist-get provider :key)
                             (list (concat "x-goog-api-key: " (plist-get provider :key))))
        :body (forj-provider-json-encode
               (append (list :systemInstruction (list :parts (vector (list :text system)))
                             :contents (forj-provider-gemini--contents messages))
                       (when tools
                         (list :tools
                               (vector
                                (list :functionDeclarations
                                      (vconcat
                                       (mapcar (lambda (tool)
                                                 (list :name (plist-get tool :name)
                                                       :description (plist-get tool :description)
                                                       :parametersJsonSchema (plist-get tool :parameters)))
                                               tools))))))))))

(defconst forj-provider-gemini--refusals
  '("SAFETY" "RECITATION" "BLOCKLIST" "PROHIBITED_CONTENT" "SPII" "IMAGE_SAFETY" "LANGUAGE")
  "The finish reasons that mean Gemini refused to answer.")

(defun forj-provider-gemini--categories (object)
  "The safety categories that blocked, from OBJECT's safetyRatings, as \" (A, B)\".
A rating counts when it says blocked, else when its probability is
MEDIUM or HIGH; nothing when none does."
  (let* ((ratings (append (plist-get object :safetyRatings) nil))
         (blocked (cl-remove-if-not (lambda (r) (eq (plist-get r :blocked) t)) ratings))
         (likely (or blocked
                     (cl-remove-if-not (lambda (r) (member (plist-get r :probability) '("MEDIUM" "HIGH")))
                                       ratings)))
         (names (delq nil (mapcar (lambda (r) (let ((c (plist-get r :category)))
                                                 (and (stringp c) (string-remove-prefix "HARM_CATEGORY_" c))))
                                  likely))))
    (if names (format " (%s)" (string-join names ", ")) "")))

(defun forj-provider-gemini--event (_stream _event data)
  "Turn one event's DATA into actions."
  (let* ((json (forj-provider-json data))
         (candidates (plist-get json :candidates))
         (candidate (and (vectorp candidates) (> (length candidates) 0) (aref candidates 0)))
         (parts (plist-get (plist-get candidate :content) :parts))
         (actions nil))
    (when (plist-get json :error)
      (push (list :error (forj-provider-reported-error data)) actions))
    (let* ((feedback (plist-get json :promptFeedback))
           (blocked (plist-get feedback :blockReason)))
      (when (stringp blocked)
        (push (list :stop (list :kind 'refusal
                                :reason (concat "the prompt was blocked: blockReason " blocked
                                                (forj-provider-gemini--categories feedback)
                                                (let ((why (plist-get feedback :blockReasonMessage)))
                                                  (if (stringp why) (concat ": " why) "")))))
              actions)
        (push (list :done) actions)))
    (when (vectorp parts)
      (cl-loop for part across parts
               do (cond
                   ((stringp (plist-get part :text))
                    (unless (eq (plist-get part :thought) t)
                      (push (list :text (plist-get part :text)) actions)))
                   ((plist-get part :functionCall)
                    (let* ((call (plist-get part :functionCall))
                           (signature (plist-get part :thoughtSignature))
                           (own (let ((id (plist-get call :id)))
                                  (and (stringp id) (not (string-empty-p id)) id)))
                           (native (append (and (stringp signature) (list :thoughtSignature signature))
                                           (and own (list :id own)))))
                      (push (list :call (append
                                         (list :id (or own (forj-provider-new-id "gemini"))
                                               :name (plist-get call :name)
                                               :args (or (plist-get call :args) (make-hash-table)))
                                         (and native
                                              (list :native (cons :family (cons "gemini" native))))))
                            actions))))))
    (let ((finish (plist-get candidate :finishReason)))
      (when (stringp finish)
        (cond
         ((equal finish "STOP"))
         ((equal finish "MAX_TOKENS")
          (push (list :stop (list :kind 'length :reason "finishReason MAX_TOKENS")) actions))
         ((member finish forj-provider-gemini--refusals)
          (push (list :stop (list :kind 'refusal
                                  :reason (concat "finishReason " finish
                                                  (forj-provider-gemini--categories candidate)
                                                  (let ((why (plist-get candidate :finishMessage)))
                                                    (if (stringp why) (concat ": " why) "")))))
                actions))
         (t (push (list :error (format "Gemini stopped the reply (%s)" finish)) actions)))
        (push (list :done) actions)))
    (nreverse actions)))

(defun forj-provider-gemini--usage (data)
  "The usage action of an event's DATA, from its usageMetadata.
Each event repeats the reply's usage so far; promptTokenCount counts
the cached tokens too, and thinking tokens are billed as output."
  (when (string-match-p "\"usageMetadata\"" data)
    (let ((usage (plist-get (ignore-errors (forj-provider-json data)) :usageMetadata))
          (number (lambda (v) (if (numberp v) v 0))))
      (when (consp usage)
        (list (list :usage
                    (forj-usage-make
                     :input (funcall number (plist-get usage :promptTokenCount))
                     :output (+ (funcall number (plist-get usage :candidatesTokenCount))
                                (funcall number (plist-get usage :thoughtsTokenCount)))
                     :cache-read (funcall number (plist-get usage :cachedContentTokenCount))
                     :input-includes-cache t)))))))

(defun forj-provider-gemini--event-and-usage (stream event data)
  "The actions of STREAM's EVENT with DATA, the reply's usage included."
  (append (forj-provider-gemini--event stream event data)
          (forj-provider-gemini--usage data)))

(forj-provider-register-family
 'gemini
 :request #'forj-provider-gemini--request
 :event #'forj-provider-gemini--event-and-usage
 :error-message #'forj-provider-error-message)

(provide 'forj-provider-gemini)
;;; forj-provider-gemini.el ends here
